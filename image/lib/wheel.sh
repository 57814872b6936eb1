# Sourced by image/build.sh and image/build-deb.sh: the project's wheel (pure Python).
#
#   project_wheel REPO WORKDIR   -> prints the wheel's path (in WORKDIR/wheel)
#
# From the committed tree (git archive $OXIEDGE_COMMIT, default HEAD): what a commit says is
# what the image or package holds, and no stale build/ directory leaks in.
# OXIEDGE_WORKTREE=1 takes the working tree instead (uncommitted changes, for development).
project_wheel() {
    local repo=$1 work=$2
    mkdir -p "$work/src"
    if [ "${OXIEDGE_WORKTREE:-0}" = 1 ] || ! git -C "$repo" rev-parse HEAD >/dev/null 2>&1; then
        tar -C "$repo" --exclude=./.venv --exclude=./build --exclude=./.git --exclude='*.egg-info' \
            --exclude=./image/out --exclude=./image/cache --exclude=__pycache__ -cf - . \
            | tar -C "$work/src" -xf -
    else
        git -C "$repo" archive --format=tar "${OXIEDGE_COMMIT:-HEAD}" | tar -C "$work/src" -xf -
    fi
    env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null python3 -m pip wheel --quiet --no-deps \
        --disable-pip-version-check -w "$work/wheel" "$work/src" >&2
    ls "$work"/wheel/oxiedge-*.whl
}
