# Sourced by scripts/device_campaign.sh and scripts/device_checks.sh on a lent GPU machine (PyTorch, no network):
# the dataset caches carried gzipped, the wheels carried in .whl/ (Opacus, dp-accounting), this checkout's src/ first.
for z in data/*/tensors.pt.gz; do
  if [ -e "$z" ] && [ ! -e "${z%.gz}" ]; then gunzip -c "$z" > "${z%.gz}"; fi
done
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
