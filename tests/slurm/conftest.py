from __future__ import annotations

from collections.abc import Iterator

import pytest

from realtools import require

from .slurmcluster import SlurmCluster


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    tools = require("slurmctld", "slurmd", "munged", "scontrol")
    c = SlurmCluster(tmp_path_factory.mktemp("slurm"), tools)
    try:
        c.start()
    except BaseException:
        c.stop()
        raise
    yield c
    c.stop()


@pytest.fixture
def cluster(slurm_cluster: SlurmCluster) -> SlurmCluster:
    slurm_cluster.reset_node()
    return slurm_cluster
