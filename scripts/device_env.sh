# Sourced by scripts/device_campaign.sh and scripts/device_checks.sh on a lent GPU machine (PyTorch, no network):
# the dataset caches carried compressed (xz; gzip from older plans), the wheels carried in .whl/ (Opacus,
# dp-accounting), this checkout's src/ first. Python's lzma: the device image need not have xz.
for z in data/*/tensors.pt.xz data/*/tensors.pt.gz; do
  if [ -e "$z" ] && [ ! -e "${z%.*}" ]; then
    python3 -c 'import gzip, lzma, shutil, sys; o = lzma.open if sys.argv[1].endswith(".xz") else gzip.open
shutil.copyfileobj(o(sys.argv[1]), open(sys.argv[2], "wb"))' "$z" "${z%.*}"
  fi
done
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
