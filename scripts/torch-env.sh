# Sourced by setup.sh, test.sh and demo.sh: chooses the Python (and so the
# torch release) guardjit is set up, built and tested with.
#
#   TORCH unset     the first python3 on PATH, with the torch it has (a
#                   verified release), or torch 2.13.0 installed when it has none
#   TORCH=2.14.1    that python3 if its torch is that release, otherwise a
#                   virtual environment of its own, made once and reused:
#                   ${GUARDJIT_VENV:-~/.cache/guardjit/venv-torch-$TORCH}
#   PYTHON=...      this interpreter, whatever its torch (overrides both)
#
# pip never replaces the torch an interpreter already has. Sets PY (the
# interpreter), GJ_TORCH (the release it will have) and GJ_TAG (for build dirs).
GJ_DEFAULT_TORCH=2.13.0
GJ_VERIFIED_TORCH="2.13.0 2.14.1"

gj_torch_of() {  # the torch release an interpreter has, or nothing
  "$1" -c 'import importlib.metadata as m; print(m.version("torch").split("+")[0])' 2>/dev/null || true
}

if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
  GJ_TORCH=$(gj_torch_of "$PY")
  GJ_TORCH=${GJ_TORCH:-${TORCH:-$GJ_DEFAULT_TORCH}}
else
  PY=$(command -v python3)
  have=$(gj_torch_of "$PY")
  if [ -z "${TORCH:-}" ]; then
    GJ_TORCH=${have:-$GJ_DEFAULT_TORCH}
  elif [ "$have" = "$TORCH" ]; then
    GJ_TORCH=$TORCH
  else
    GJ_TORCH=$TORCH
    venv=${GUARDJIT_VENV:-$HOME/.cache/guardjit/venv-torch-$TORCH}
    if [ ! -x "$venv/bin/python" ]; then
      echo "==> venv for torch $TORCH: $venv"
      "$PY" -m venv "$venv"
    fi
    PY=$venv/bin/python
  fi
fi
case " $GJ_VERIFIED_TORCH " in
  *" $GJ_TORCH "*) ;;
  *) echo "warning: torch $GJ_TORCH is not a release guardjit verifies ($GJ_VERIFIED_TORCH);" \
          "guardjit will keep torch's own guards there (docs/porting.md ports a release)" >&2 ;;
esac
GJ_TAG=torch-$GJ_TORCH
export PY GJ_TORCH GJ_TAG
