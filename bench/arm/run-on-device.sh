#!/usr/bin/env bash
# Run oxiedge's benchmark suite on this device (Raspberry Pi 5 / 500, 4, 3, Zero 2 W, other
# arm64 boards; Raspberry Pi OS or Debian 12/13, 64-bit; also works on x86-64 for a labelled
# comparison) and write a results folder.
#
#   sudo bench/arm/run-on-device.sh [--quick] [--no-peers] [--cpus 0-3] [--mem 1G] [--out DIR]
#
# What it does (the method is written down in bench/arm/README.md):
#   1. records the device: model, SoC/CPU, cores, memory, kernel, OS, the storage under the
#      data dir, CPU governor, throttling state;
#   2. makes a venv (.venv-bench) with oxiedge from this checkout and the two client
#      libraries the bench uses (paho-mqtt, pika); PIP_* variables (PIP_INDEX_URL,
#      PIP_FIND_LINKS + PIP_NO_INDEX for a folder of wheels) pass through to pip;
#   3. with peers (default) apt-get installs Mosquitto and RabbitMQ (needs root);
#   4. runs, with every broker pinned by taskset to at most 4 cores (a Pi 4 has 4) and under
#      a memory cap when systemd-run can make a scope:
#        - bench.store_bench  (synced commits/s, documents/s vs one sync per document)
#        - bench              (throughput/latency scenarios, interleaved, medians, ratios)
#        - bench.memory       (RSS idle / queued / 1,000 clients, time to ready)
#        - bench.backlog      (one offline MQTT session with 100,000 QoS 1 messages on the
#                              card: RSS, ready after SIGKILL, fill and drain rates)
#   5. writes DIR/device.json, DIR/*.json, DIR/*.txt and DIR/RESULTS.md, whose tables have
#      the columns of bench/README.md's.
# Nothing is uploaded; send the folder (or RESULTS.md) yourself.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
quick=0
peers=1
cpus=""
mem="1G"
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --no-peers) peers=0 ;;
        --cpus) cpus="$2"; shift ;;
        --mem) mem="$2"; shift ;;
        --out) out="$2"; shift ;;
        -h|--help) sed -n '2,/^# Nothing is uploaded/p' "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift
done

ncpu="$(nproc)"
if [ -z "$cpus" ]; then
    # A Pi 4/5 has 4 cores: never give the broker more, whatever the board has.
    if [ "$ncpu" -ge 4 ]; then cpus="0-3"; else cpus="0-$((ncpu - 1))"; fi
fi
host="$(hostname -s 2>/dev/null || hostname)"
stamp="$(date -u +%Y%m%dT%H%MZ)"
out="${out:-$here/results/${host}-${stamp}}"
mkdir -p "$out"
echo "results -> $out"

# ---- 1. the device ---------------------------------------------------------------------
# The brokers' data dirs and the store bench's files go under TMPDIR. Debian 13 (and so
# Raspberry Pi OS trixie and the oxiedge image) mounts /tmp as tmpfs: there the figures would
# be RAM's, not the card's. Use a folder of the checkout instead (on the card it was cloned
# to) unless TMPDIR names a place.
# On the oxiedge image that place is its data partition (the disk its broker writes to;
# the root file system has too little free space: the broker's disk alarm, 190 MB free,
# blocks publishers there).
if [ -z "${TMPDIR:-}" ] && [ "$(findmnt -n -o FSTYPE --target /tmp 2>/dev/null)" = tmpfs ]; then
    if [ "$(id -u)" = 0 ] && mountpoint -q /var/lib/oxiedge; then
        export TMPDIR=/var/lib/oxiedge/bench-tmp
    else
        export TMPDIR="$repo/.bench-tmp"
    fi
    mkdir -p "$TMPDIR"
    echo "note: /tmp is tmpfs; data dirs under $TMPDIR"
fi
model="$( { tr -d '\0' < /proc/device-tree/model; } 2>/dev/null || true)"
[ -n "$model" ] || model="$(grep -m1 -E '^(model name|Model|Hardware)' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
governor="$(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo unknown)"
throttled="$(command -v vcgencmd >/dev/null && vcgencmd get_throttled 2>/dev/null || echo n/a)"
temp="$(command -v vcgencmd >/dev/null && vcgencmd measure_temp 2>/dev/null || echo n/a)"
disk="$(findmnt -n -o SOURCE,FSTYPE,OPTIONS --target "${TMPDIR:-/tmp}" 2>/dev/null || echo unknown)"
os="$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME" || uname -s)"
# The kernel's page size: Raspberry Pi OS boots a Pi 5 with a 16 KiB-page kernel
# (kernel_2712.img), Debian's linux-image-arm64 uses 4 KiB (docs/appliance.md).
pagesize="$(getconf PAGESIZE 2>/dev/null || echo unknown)"
compatible="$( { tr '\0' ' ' < /proc/device-tree/compatible; } 2>/dev/null || echo n/a)"
# The device the data dir sits on: SD card (mmcblk), NVMe or USB behind the Pi 5's PCIe/RP1.
# A partition names its disk in PKNAME; a file system on a whole disk (a VM's /dev/vda) has
# none and is its own disk.
blockdev="$(findmnt -n -o SOURCE --target "${TMPDIR:-/tmp}" 2>/dev/null || true)"
parent="$(lsblk -ndo PKNAME "$blockdev" 2>/dev/null || true)"
[ -z "$parent" ] || blockdev="/dev/$parent"
storage="$(lsblk -ndo NAME,TRAN,MODEL,SIZE "$blockdev" 2>/dev/null | tr -s ' ' || true)"
pyver="$(python3 -c 'import platform; print(platform.python_version())' 2>/dev/null || echo none)"
rev="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || cat "$repo/REVISION" 2>/dev/null || true)"
# The values reach Python through the environment, not inside its program text: a model
# string with a quote or a backslash in it cannot break the record.
DEV_HOST="$host" DEV_MODEL="$model" DEV_NPROC="$ncpu" DEV_CPUS="$cpus" DEV_MEM="$mem" \
DEV_OS="$os" DEV_DISK="$disk" DEV_GOVERNOR="$governor" DEV_THROTTLED="$throttled" \
DEV_TEMP="$temp" DEV_WHEN="$stamp" DEV_QUICK="$quick" DEV_PAGESIZE="$pagesize" \
DEV_COMPATIBLE="$compatible" DEV_STORAGE="${storage:-unknown}" DEV_PYTHON="$pyver" \
DEV_REV="${rev:-unknown}" python3 - "$out/device.json" <<'DEVICE'
import json, os, platform, sys
e = os.environ
json.dump({
    "host": e["DEV_HOST"], "model": e["DEV_MODEL"], "arch": platform.machine(),
    "nproc": int(e["DEV_NPROC"]), "broker_cpus": e["DEV_CPUS"], "mem_cap": e["DEV_MEM"],
    "kernel": platform.release(), "os": e["DEV_OS"],
    "memory": open("/proc/meminfo").readline().split(":")[1].strip(),
    "disk_under_tmp": e["DEV_DISK"], "governor": e["DEV_GOVERNOR"],
    "throttled": e["DEV_THROTTLED"], "temperature": e["DEV_TEMP"], "when": e["DEV_WHEN"],
    "quick": e["DEV_QUICK"] == "1", "page_size": e["DEV_PAGESIZE"],
    "compatible": e["DEV_COMPATIBLE"].strip(), "storage": e["DEV_STORAGE"],
    "python": e["DEV_PYTHON"], "oxiedge": e["DEV_REV"],
}, open(sys.argv[1], "w"), indent=1)
DEVICE
cat "$out/device.json"; echo
case "$(uname -m)" in
    aarch64|arm64) ;;
    armv7l|armv6l) echo "32-bit ARM: rocksdict has no wheel for it; use a 64-bit OS" >&2; exit 1 ;;
    *) echo "note: not an ARM device ($(uname -m)); results are labelled with this machine" ;;
esac

# ---- 2. venv ------------------------------------------------------------------------------
venv="$repo/.venv-bench"
if [ -x "$repo/.venv/bin/python" ] && "$repo/.venv/bin/python" -c "import oxiedge, pika, paho" 2>/dev/null; then
    py="$repo/.venv/bin/python"
else
    if [ ! -x "$venv/bin/python" ] && ! python3 -c 'import ensurepip' 2>/dev/null; then
        # Debian and Raspberry Pi OS split venv support into python3-venv.
        if [ "$(id -u)" = 0 ]; then
            # An image may ship without package lists (the oxiedge image deletes them).
            apt-get update -q && apt-get install -y -q python3-venv
        else
            echo "python3 -m venv needs the python3-venv package: sudo apt install python3-venv" >&2
            exit 1
        fi
    fi
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    # Not the [test] extra: mypy, ruff, selenium and the rest are tens of MB the bench
    # never imports, and the oxiedge image's root file system has ~350 MB free.
    "$venv/bin/pip" install -q -e "$repo" "paho-mqtt>=2.0" "pika>=1.3"
    py="$venv/bin/python"
fi

# ---- 3. peers -------------------------------------------------------------------------------
peer_args=()
if [ "$peers" = 1 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "peers need root for apt-get; rerun with sudo or pass --no-peers" >&2; exit 1
    fi
    peer_args=(--with-peers)
fi

# ---- 4. limits ------------------------------------------------------------------------------
wrap=""
# A transient scope needs systemd as PID 1 and, for the system manager, root: try one
# rather than guess (systemctl says "running" to a user who may not make scopes).
if command -v systemd-run >/dev/null \
    && systemd-run --scope --quiet -p MemoryMax="$mem" true >/dev/null 2>&1; then
    wrap="systemd-run --scope --quiet -p MemoryMax=$mem"
else
    echo "note: no systemd scope available, brokers run without a memory cap" | tee "$out/NO-MEMORY-CAP"
fi

if [ "$quick" = 1 ]; then
    sizes=(--count 20000 --duration 5 --repeats 3 --drain-count 10000 --latency-count 1000)
    store=(--seconds 2 --repeats 2)
    memargs=(--clients 200 --queued 20000)
    backlog=(--messages 20000)
else
    sizes=(--count 100000 --duration 10 --repeats 5 --drain-count 50000 --latency-count 3000)
    store=(--seconds 3 --repeats 3)
    memargs=(--clients 1000 --queued 100000)
    backlog=(--messages 100000)
fi

cd "$repo"
echo "== store bench (pinned to $cpus)"
# Exit status 1 means "ratio below the target": a result, not a failure of the script.
taskset -c "$cpus" "$py" -m bench.store_bench "${store[@]}" --json "$out/store.json" \
    | tee "$out/store.txt" || true
echo "== throughput / latency suite"
"$py" -m bench --broker oxiedge "${peer_args[@]}" --cpus "$cpus" ${wrap:+--wrap "$wrap"} \
    "${sizes[@]}" --label "$model" --json "$out/suite.json" | tee "$out/suite.txt" || true
echo "== memory / start-up"
"$py" -m bench.memory --broker oxiedge "${peer_args[@]}" --cpus "$cpus" ${wrap:+--wrap "$wrap"} \
    "${memargs[@]}" --json "$out/memory.json" | tee "$out/memory.txt" || true
echo "== backlog on disk (one offline MQTT session, pinned to $cpus)"
# --memory-max: in a scope where systemd can make one, else the peak RSS against the cap.
taskset -c "$cpus" "$py" -m bench.backlog "${backlog[@]}" --memory-max "$mem" --json "$out/backlog.json" \
    | tee "$out/backlog.txt" || true

# ---- 5. RESULTS.md --------------------------------------------------------------------------
"$py" -m bench.arm.results "$out" > "$out/RESULTS.md"
echo "wrote $out/RESULTS.md"
