#!/usr/bin/env bash
# One-command set-up on a fresh Debian/Ubuntu machine with Python 3.11:
#   scripts/setup.sh            # .venv with fed + snakemake + mlflow + torch; Fashion-MNIST from Debian if root
#   scripts/setup.sh --no-apt   # skip the optional Debian package dataset-fashion-mnist
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
"$python" -c 'import sys; assert sys.version_info[:2] >= (3, 11), "fedrepro needs Python >= 3.11"'

[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/pip install --disable-pip-version-check -q -e ".[dev]"

if [ "${1:-}" != "--no-apt" ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] \
   && [ ! -d /usr/share/datasets/fashion-mnist ]; then
  # Optional: Fashion-MNIST offline (imported automatically by fed.data when present).
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist) \
    || echo "setup: dataset-fashion-mnist not installed (optional; torchvision downloads FMNIST when online)"
fi
echo "setup: done. Activate with: source .venv/bin/activate"
