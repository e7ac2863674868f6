"""The packer's grants, read back the way ``sharedserve serve`` reads them.

The device plugin's and the DRA driver's grants are read back the same way in
tests/unit/test_contract.py; the packer's need a model on disk, so they are here. Nothing is
started: ``prepare_pack`` writes each replica's env, which is what a replica would be given.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sharedserve.config import CapSource, GpuCapRequest, PackEntry, PackSettings
from sharedserve.contract import GpuShare, Grant, fraction_of, mib_of
from sharedserve.gpu.backend import open_gpu_backend
from sharedserve.limits.gpu import parse_cap_request, resolve_cap, select_visible_gpu
from sharedserve.pack.prepare import prepare_pack

pytestmark = [pytest.mark.tensorflow]

FLAG = CapSource.FLAG


def test_every_replicas_grant_is_served_as_written(
    models_dir: Path, fake_gpus: Path, tmp_path: Path
) -> None:
    tiny = models_dir / "tiny"
    entries = (
        PackEntry(tiny, replicas=2, name="by-mib", cap=GpuCapRequest.of(FLAG, mib=3000)),
        PackEntry(tiny, replicas=1, name="by-fraction", cap=GpuCapRequest.of(FLAG, fraction=0.3)),
        PackEntry(tiny, replicas=2, name="split"),  # a share of what the caps leave
    )
    settings = PackSettings(entries, log_dir=tmp_path / "logs", fake_gpus=fake_gpus)
    plan = prepare_pack(settings)
    backend = open_gpu_backend(fake_gpus)
    assert backend is not None
    try:
        gpus = backend.list_gpus()
    finally:
        backend.close()
    caps = {}
    for spec in plan.specs:
        # As serve does: the contract read once, the GPU CUDA will call device 0, the cap.
        grant = Grant.from_env(spec.env)
        (written,) = grant.gpus
        gpu = select_visible_gpu(gpus, grant.cuda_visible_devices)
        assert gpu is not None and gpu.uuid == written.uuid == spec.gpu
        assert written.fraction is not None and written.mib is not None
        assert written.fraction * gpu.memory_mib <= written.mib
        cap = resolve_cap(parse_cap_request(None, None, grant), gpu)
        assert cap.share == GpuShare(gpu.uuid, written.fraction, written.mib)
        assert cap.source is CapSource.ENV
        caps[spec.name] = written.mib
        # Each replica stops itself before the packer's SIGKILL would cut it.
        grace = spec.command[spec.command.index("--shutdown-grace") + 1]
        assert 0 < float(grace) < settings.stop_grace_s
    total = gpus[0].memory_mib
    assert caps["by-mib-0"] == caps["by-mib-1"] == 3000
    assert caps["by-fraction-0"] == mib_of(0.3, total)
    assert 0 < caps["split-0"] == caps["split-1"]
    assert fraction_of(caps["by-fraction-0"], total) <= 0.3
