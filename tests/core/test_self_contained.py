"""The repository stands on its own: nothing in it cites a design document kept elsewhere.

What a reader needs to follow the code is in ``docs/`` (the durable path in
``docs/storage.md``, the image in ``docs/appliance.md``, the options in README). The names
are spelled in pieces here so that this file does not mention them itself.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Documents that once lived beside the checkout, never in it.
OUTSIDE_DOCUMENTS = ("DESIGN" + ".md", "STORAGE" + "-NOTES", "IMAGE" + "-NOTES")
#: Not the repository's files: version control, virtual environments, caches, build output.
SKIPPED_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache",
                ".ruff_cache", ".hypothesis"}


def repository_files() -> list[Path]:
    """Every file of the checkout: tracked or not, ignored ones (build output) aside."""
    if (REPO / ".git").exists() and shutil.which("git"):
        out = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others",
             "--exclude-standard"], capture_output=True, check=True).stdout
        names = [name for name in out.decode().split("\0") if name]
        return [REPO / name for name in names
                if not SKIPPED_DIRS.intersection(Path(name).parts)]
    return [path for path in REPO.rglob("*")
            if path.is_file() and not SKIPPED_DIRS.intersection(path.relative_to(REPO).parts)]


def test_no_file_cites_a_document_outside_the_repository() -> None:
    files = repository_files()
    assert len(files) > 100, "the walk found too few files to mean anything"
    citing = []
    for path in files:
        if not path.is_file():  # deleted in the work tree, still in the index
            continue
        data = path.read_bytes()
        citing += [f"{path.relative_to(REPO)}: {name}" for name in OUTSIDE_DOCUMENTS
                   if name.encode() in data]
    assert not citing, "write what the reader needs in docs/ instead:\n" + "\n".join(citing)
