# Shared by scripts/*.sh: check prerequisites, create .venv, install the project into it.
# Sourced, not run. Sets RAFTKA_ROOT and VENV_PY.

RAFTKA_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$RAFTKA_ROOT/.venv"
VENV_PY="$VENV/bin/python"

die() { echo "error: $*" >&2; exit 1; }

find_python() {
    for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
           "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
            echo "$candidate"; return 0
        fi
    done
    return 1
}

check_java() {
    # Spark needs Java 17 or newer. Only the Spark parts need it, so this warns.
    if ! command -v java >/dev/null 2>&1; then
        echo "warning: Java is not installed; Spark tests and demos will be skipped." >&2
        echo "         Install Java 17+ (Debian/Ubuntu: apt-get install openjdk-17-jre-headless)." >&2
        return 1
    fi
    local version
    version=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)
    if [ -z "$version" ] || [ "$version" -lt 17 ]; then
        echo "warning: Java ${version:-?} found, Spark needs 17+; Spark tests and demos will be skipped." >&2
        return 1
    fi
    return 0
}

# ensure_venv EXTRA: create .venv if missing and (re)install the project when pyproject.toml or a C
# source changed.
ensure_venv() {
    local extra="${1:-}"
    local python
    python=$(find_python) || die "Python 3.11 or newer is required and was not found on PATH.
       Install it (Debian/Ubuntu: apt-get install python3 python3-venv; or pyenv install 3.11),
       or point PYTHON at one: PYTHON=/path/to/python3.11 $0"
    if [ ! -x "$VENV_PY" ]; then
        echo "==> creating $VENV with $python"
        "$python" -m venv "$VENV" || die "could not create a virtual environment.
       Install the venv module (Debian/Ubuntu: apt-get install python3-venv) and try again."
    fi
    local stamp="$VENV/.raftka-installed${extra:+-$extra}"
    local want
    # The C extensions' sources count too: the install builds them, so a changed .c is rebuilt.
    want=$(cat "$RAFTKA_ROOT/pyproject.toml" "$RAFTKA_ROOT"/common/*.c | cksum)
    # An install with the test extra holds everything a plain install does.
    if [ -z "$extra" ] && [ -f "$VENV/.raftka-installed-test" ] && [ "$(cat "$VENV/.raftka-installed-test")" = "$want" ]; then
        return 0
    fi
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "==> installing raftka${extra:+[$extra]} into .venv (the first time downloads pyspark, a few minutes)"
        "$VENV_PY" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
        "$VENV_PY" -m pip install --quiet -e "$RAFTKA_ROOT${extra:+[$extra]}" ||
            die "installing the project into .venv failed (see pip's message above)."
        echo "$want" > "$stamp"
    fi
}

# ensure_kcat: kcat (the Debian package) for the compatibility suite; installed with apt-get where
# this runs as root and apt-get exists, else the kcat tests skip and say why.
ensure_kcat() {
    command -v kcat >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "==> installing kcat (apt-get) for the compatibility suite"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q kcat >/dev/null 2>&1 ||
            { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q kcat >/dev/null 2>&1; } ||
            echo "warning: could not install kcat; its compatibility tests will be skipped." >&2
    else
        echo "warning: kcat is not installed (Debian/Ubuntu: apt-get install kcat); its tests will be skipped." >&2
    fi
    return 0
}
