#!/usr/bin/env bash
# Refresh docs/screenshots/ (the web UI's pictures in the docs) from a run of the browser tests.
#
#   scripts/refresh-screenshots.sh              run tests/browser/test_every_page.py (every page, light
#                                               and dark, desktop and phone, as its PLAN visits them) into a new run folder under
#                                               .artifacts/, then replace docs/screenshots/*.png with
#                                               its screenshots (only when every test passed)
#   scripts/refresh-screenshots.sh --copy [DIR] only copy the PNGs of DIR (default: the folder the
#                                               tests write to by default, .artifacts/screenshots)
#
# The tests write PNGs to $KVREG_SCREENSHOT_DIR, by default .artifacts/screenshots/ (git-ignored);
# test_every_page.py takes the set docs/web-ui.md shows (DOC_SHOTS there: window-sized, small
# files); nothing is committed until this script copies it.
# Needs what the tests need: `make install`, and Debian's chromium (`make browser`).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
DEST="$ROOT/docs/screenshots"

copy() {
    local src="$1"
    shopt -s nullglob
    local pngs=("$src"/*.png)
    if [ "${#pngs[@]}" -eq 0 ]; then
        echo "refresh-screenshots: no PNG in $src" >&2
        exit 1
    fi
    mkdir -p "$DEST"
    rm -f "$DEST"/*.png
    cp "${pngs[@]}" "$DEST/"
    echo "refresh-screenshots: ${#pngs[@]} screenshots copied from $src to $DEST:"
    (cd "$DEST" && ls -1 ./*.png | sed 's|^\./|  |')
}

case "${1:-}" in
    --copy)
        copy "${2:-$ROOT/.artifacts/screenshots}"
        ;;
    "")
        run="$ROOT/.artifacts/screenshots-$(date -u +%Y%m%dT%H%M%SZ)"
        mkdir -p "$run"
        echo "refresh-screenshots: running tests/browser/test_every_page.py; screenshots in $run"
        if ! (cd "$ROOT" && KVREG_SCREENSHOT_DIR="$run" "$VENV/bin/python" -m pytest tests/browser/test_every_page.py -q -p no:cacheprovider); then
            echo "refresh-screenshots: the browser tests failed; docs/screenshots/ is unchanged." >&2
            echo "  (scripts/refresh-screenshots.sh --copy $run copies these screenshots anyway)" >&2
            exit 1
        fi
        copy "$run"
        ;;
    *)
        echo "usage: $0 [--copy [DIR]]" >&2
        exit 2
        ;;
esac
