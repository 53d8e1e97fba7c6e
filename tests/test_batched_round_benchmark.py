"""benchmarks/batched_round.py's ``--profile``: one more batched round under torch.profiler, written as a headline
(the round's wall time, the operators' own time and its share of it) and the operators by their own time."""

import re
import sys

import torch
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import batched_round as br  # noqa: E402


def test_profile_writes_the_round_s_share_and_its_operators(synthetic_root, tmp_path):
    cfg, scheme = br.PROTOCOLS["dpms"]
    cfg = cfg | {"num_clients": 2}
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        e = br.engine("synthetic", str(synthetic_root), cfg, scheme, True, "cpu", False, "fedavg")
        br.profile_round(e, lambda: None, tmp_path / "p.txt", "dpms fedavg, 2 clients batched")
    finally:
        torch.set_num_threads(threads)
    head, *table = (tmp_path / "p.txt").read_text().splitlines()
    m = re.fullmatch(r"dpms fedavg, 2 clients batched on cpu: one round ([\d.]+) s; operators' own CPU time "
                     r"([\d.]+) s \((\d+)% of the wall time\)", head)  # fmt: skip
    assert m, head
    wall, own, share = float(m[1]), float(m[2]), int(m[3])
    assert 0 < own <= wall * 1.05 and abs(share - 100 * own / wall) < 2  # the seconds are printed rounded
    # the batched step's own operators, most expensive first: the convolutions' backward pass among them
    assert any("aten::convolution_backward" in row for row in table)
    assert e.ctx.round == 1  # the profiled round ran
