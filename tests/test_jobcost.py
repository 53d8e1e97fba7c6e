"""``fed.jobcost``: a job's cost in the file format of Snakemake's ``benchmark:``, so that the cost tables read a
campaign's jobs as they read the workflow's."""

from pathlib import Path

import pytest

from fed import jobcost


def test_a_written_benchmark_reads_back_and_has_snakemake_s_columns(tmp_path):
    path = tmp_path / "benchmark.tsv"
    jobcost.write(path, 3725.2, 1234.567, 40.0, max_rss_since="job")
    header, row = (line.split("\t") for line in path.read_text().splitlines())
    assert header[:10] == list(jobcost.COLUMNS) and header[10] == "max_rss_since"
    assert row[1] == "1:02:05" and row[3] == "NA" and row[10] == "job"
    assert jobcost.read(path) == {"seconds": 3725.2, "max_rss_mb": 1234.57, "cpu_seconds": 40.0}
    assert not list(tmp_path.glob("*.tmp")) and jobcost.read(tmp_path / "none.tsv") is None


def test_snakemake_s_own_benchmark_file_reads_as_its_job_s_cost(tmp_path):
    path = tmp_path / "benchmark.tsv"  # a train job's, as Snakemake 8 writes it (reference/headtohead_cpu)
    path.write_text(
        "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
        "1145.23\t0:19:05\t1360.41\t4347.83\t1024.72\t1124.60\t1.96\t4.53\t39.29\t450.17\n"
    )
    assert jobcost.read(path) == {"seconds": 1145.23, "max_rss_mb": 1360.41, "cpu_seconds": 450.17}


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="the peak is reset through Linux's procfs")
def test_the_meter_s_peak_is_its_job_s_not_the_process_lifetime_s():
    """A worker runs job after job: the second job's peak must not be the first one's 300 MB."""
    import mmap

    size = 300 * 2**20
    with jobcost.JobMeter() as big:
        # fresh pages from the kernel, each one touched: a bytearray may reuse memory the worker already holds
        # (a 2 GB xdist worker after other tests did, and its RSS did not move)
        with mmap.mmap(-1, size) as block:
            for offset in range(0, size, mmap.PAGESIZE):
                block[offset] = 1
    with jobcost.JobMeter() as small:
        pass
    assert big.since == small.since == "job"
    assert big.max_rss_mb > small.max_rss_mb + 250 and small.seconds >= 0 and big.cpu_seconds >= 0
