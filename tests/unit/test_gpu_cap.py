"""Table-driven tests of the GPU memory cap: request parsing, visible-GPU choice, resolution.

Pure logic only: ``apply_tensorflow`` imports TensorFlow and is exercised elsewhere.
"""

from __future__ import annotations

import pytest

from sharedserve.contract import GPU_MEMORY_FRACTION, GPU_MEMORY_MIB, GpuShare, Grant
from sharedserve.errors import ConfigError
from sharedserve.gpu.backend import GpuInfo
from sharedserve.limits.gpu import (
    CapSource,
    GpuCap,
    GpuCapRequest,
    apply_onnxruntime,
    parse_cap_request,
    resolve_cap,
    select_visible_gpu,
)

FLAG, ENV, NONE = CapSource.FLAG, CapSource.ENV, CapSource.NONE
FRACTION_FLAG = "--gpu-memory-fraction"
MIB_FLAG = "--gpu-memory-mib"
FRACTION_ENV = "SHAREDSERVE_GPU_MEMORY_FRACTION"
MIB_ENV = "SHAREDSERVE_GPU_MEMORY_MIB"

UUID0 = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
UUID1 = "GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff"
GPU0 = GpuInfo(uuid=UUID0, index=0, name="Tesla K80", memory_mib=11441)
GPU1 = GpuInfo(uuid=UUID1, index=1, name="Tesla T4", memory_mib=15360)
# Listed out of index order on purpose: the default choice is by index, not by list position.
GPUS = [GPU1, GPU0]


# --- parse_cap_request -------------------------------------------------------------------------


def _request(
    flag_fraction: float | None, flag_mib: int | None, env_fraction: str | None, env_mib: str | None
) -> GpuCapRequest:
    """As ``serve`` does: the env contract read once by its reader, then combined with flags."""
    env = {k: v for k, v in ((GPU_MEMORY_FRACTION, env_fraction), (GPU_MEMORY_MIB, env_mib)) if v}
    return parse_cap_request(flag_fraction, flag_mib, Grant.from_env(env))


@pytest.mark.parametrize(
    ("flag_fraction", "flag_mib", "env_fraction", "env_mib", "expected"),
    [
        pytest.param(None, None, None, None, GpuCapRequest.of(NONE), id="nothing"),
        pytest.param(None, None, "", "", GpuCapRequest.of(NONE), id="empty-env"),
        pytest.param(None, None, "  ", "\t\n", GpuCapRequest.of(NONE), id="blank-env"),
        pytest.param(
            0.5, None, None, None, GpuCapRequest.of(FLAG, fraction=0.5), id="flag-fraction"
        ),
        pytest.param(
            1.0, None, None, None, GpuCapRequest.of(FLAG, fraction=1.0), id="flag-fraction-1"
        ),
        pytest.param(None, 2048, None, None, GpuCapRequest.of(FLAG, mib=2048), id="flag-mib"),
        pytest.param(
            0.25,
            None,
            "0.75",
            "4096",
            GpuCapRequest.of(FLAG, fraction=0.25),
            id="flag-fraction-wins",
        ),
        pytest.param(
            None, 1024, "0.75", "4096", GpuCapRequest.of(FLAG, mib=1024), id="flag-mib-wins"
        ),
        pytest.param(
            None, None, "0.5", None, GpuCapRequest.of(ENV, fraction=0.5), id="env-fraction"
        ),
        pytest.param(
            None, None, " 0.5 ", None, GpuCapRequest.of(ENV, fraction=0.5), id="env-frac-ws"
        ),
        pytest.param(None, None, None, "3000", GpuCapRequest.of(ENV, mib=3000), id="env-mib"),
        pytest.param(None, None, None, " 3000\n", GpuCapRequest.of(ENV, mib=3000), id="env-mib-ws"),
        pytest.param(None, None, "0.5", "3000", GpuCapRequest.of(ENV, mib=3000), id="env-mib-wins"),
        pytest.param(
            None, None, "0.5", "", GpuCapRequest.of(ENV, fraction=0.5), id="empty-env-mib-unset"
        ),
        pytest.param(
            None, None, "  ", "3000", GpuCapRequest.of(ENV, mib=3000), id="blank-env-frac-unset"
        ),
    ],
)
def test_parse_cap_request(
    flag_fraction: float | None,
    flag_mib: int | None,
    env_fraction: str | None,
    env_mib: str | None,
    expected: GpuCapRequest,
) -> None:
    assert _request(flag_fraction, flag_mib, env_fraction, env_mib) == expected


@pytest.mark.parametrize(
    ("flag_fraction", "flag_mib", "env_fraction", "env_mib", "named"),
    [
        pytest.param(0.5, 1024, None, None, FRACTION_FLAG, id="both-flags"),
        pytest.param(0.0, None, None, None, FRACTION_FLAG, id="flag-fraction-0"),
        pytest.param(1.5, None, None, None, FRACTION_FLAG, id="flag-fraction-1.5"),
        pytest.param(-0.1, None, None, None, FRACTION_FLAG, id="flag-fraction-neg"),
        pytest.param(float("nan"), None, None, None, FRACTION_FLAG, id="flag-fraction-nan"),
        pytest.param(float("inf"), None, None, None, FRACTION_FLAG, id="flag-fraction-inf"),
        pytest.param(None, 0, None, None, MIB_FLAG, id="flag-mib-0"),
        pytest.param(None, -5, None, None, MIB_FLAG, id="flag-mib-neg"),
        pytest.param(None, None, "0", None, FRACTION_ENV, id="env-fraction-0"),
        pytest.param(None, None, "1.5", None, FRACTION_ENV, id="env-fraction-1.5"),
        pytest.param(None, None, "-0.1", None, FRACTION_ENV, id="env-fraction-neg"),
        pytest.param(None, None, "abc", None, FRACTION_ENV, id="env-fraction-abc"),
        pytest.param(None, None, "nan", None, FRACTION_ENV, id="env-fraction-nan"),
        pytest.param(None, None, "inf", None, FRACTION_ENV, id="env-fraction-inf"),
        pytest.param(None, None, None, "0", MIB_ENV, id="env-mib-0"),
        pytest.param(None, None, None, "-5", MIB_ENV, id="env-mib-neg"),
        pytest.param(None, None, None, "1.5", MIB_ENV, id="env-mib-1.5"),
        pytest.param(None, None, None, "x", MIB_ENV, id="env-mib-x"),
        pytest.param(None, None, "0.5", "x", MIB_ENV, id="env-mib-bad-despite-good-fraction"),
        # The contract is read whole before flags are weighed: a variable that cannot be read is
        # a broken grant, said at start rather than hidden by a flag.
        pytest.param(0.25, None, "abc", None, FRACTION_ENV, id="bad-env-despite-a-flag"),
    ],
)
def test_parse_cap_request_rejects(
    flag_fraction: float | None,
    flag_mib: int | None,
    env_fraction: str | None,
    env_mib: str | None,
    named: str,
) -> None:
    with pytest.raises(ConfigError) as info:
        _request(flag_fraction, flag_mib, env_fraction, env_mib)
    assert named in info.value.message


def test_both_flags_error_names_both() -> None:
    with pytest.raises(ConfigError) as info:
        parse_cap_request(0.5, 1024)
    assert FRACTION_FLAG in info.value.message
    assert MIB_FLAG in info.value.message


# --- select_visible_gpu ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "visible", "expected"),
    [
        pytest.param(GPUS, None, GPU0, id="unset-lowest-index"),
        pytest.param([GPU1], None, GPU1, id="unset-single"),
        pytest.param(GPUS, "0", GPU0, id="index-0"),
        pytest.param(GPUS, "1", GPU1, id="index-1"),
        pytest.param(GPUS, " 1 ", GPU1, id="index-padded"),
        pytest.param(GPUS, "1,0", GPU1, id="list-takes-first"),
        pytest.param(GPUS, "0,1", GPU0, id="list-takes-first-0"),
        pytest.param(GPUS, UUID1, GPU1, id="uuid"),
        pytest.param(GPUS, UUID0, GPU0, id="uuid-0"),
        pytest.param(GPUS, "GPU-9f8e", GPU1, id="uuid-prefix"),
        pytest.param(GPUS, f"{UUID0},{UUID1}", GPU0, id="uuid-list-first"),
        pytest.param(GPUS, "", None, id="empty-hides-all"),
        pytest.param(GPUS, "-1", None, id="minus-one"),
        pytest.param(GPUS, "none", None, id="none"),
        pytest.param(GPUS, "void", None, id="void"),
        pytest.param(GPUS, ",0", None, id="empty-first-entry"),
        pytest.param(GPUS, "7", None, id="unknown-index"),
        pytest.param(GPUS, "7,0", None, id="unknown-index-first"),
        pytest.param(GPUS, "GPU-ffff", None, id="unknown-uuid"),
        pytest.param([], None, None, id="no-gpus-unset"),
        pytest.param([], "0", None, id="no-gpus-index"),
        pytest.param([], UUID0, None, id="no-gpus-uuid"),
    ],
)
def test_select_visible_gpu(gpus: list[GpuInfo], visible: str | None, expected: GpuInfo) -> None:
    assert select_visible_gpu(gpus, visible) == expected


# --- resolve_cap -------------------------------------------------------------------------------

SMALL = GpuInfo(uuid="GPU-small", index=0, name="Small GPU", memory_mib=1000)


@pytest.mark.parametrize(
    ("request_", "gpu", "expected"),
    [
        pytest.param(
            GpuCapRequest.of(FLAG, fraction=0.5),
            GPU0,
            GpuCap(GpuShare(UUID0, 0.5, 5720), FLAG, 11441),
            id="fraction-floors",  # 0.5 * 11441 = 5720.5
        ),
        pytest.param(
            GpuCapRequest.of(ENV, fraction=0.25),
            SMALL,
            GpuCap(GpuShare("GPU-small", 0.25, 250), ENV, 1000),
            id="fraction-exact",
        ),
        pytest.param(
            GpuCapRequest.of(FLAG, fraction=1.0),
            GPU1,
            GpuCap(GpuShare(UUID1, 1.0, 15360), FLAG, 15360),
            id="fraction-whole",
        ),
        pytest.param(
            GpuCapRequest.of(ENV, fraction=0.75),
            GpuInfo("GPU-odd", 0, "Odd", 1023),
            GpuCap(GpuShare("GPU-odd", 0.75, 767), ENV, 1023),
            id="fraction-floors-odd",  # 0.75 * 1023 = 767.25
        ),
        pytest.param(
            GpuCapRequest.of(FLAG, mib=250),
            SMALL,
            GpuCap(GpuShare("GPU-small", 0.25, 250), FLAG, 1000),
            id="mib-to-fraction",
        ),
        pytest.param(
            GpuCapRequest.of(ENV, mib=1000),
            SMALL,
            GpuCap(GpuShare("GPU-small", 1.0, 1000), ENV, 1000),
            id="mib-equals-total",
        ),
        pytest.param(
            GpuCapRequest.of(FLAG, mib=1),
            GpuInfo("GPU-3", 0, "Three", 3),
            GpuCap(GpuShare("GPU-3", 0.333333, 1), FLAG, 3),
            id="mib-fraction-rounded",
        ),
        pytest.param(
            GpuCapRequest.of(FLAG, fraction=0.29),
            GpuInfo("GPU-100", 0, "Hundred", 100),
            GpuCap(GpuShare("GPU-100", 0.29, 29), FLAG, 100),
            id="fraction-as-written",  # 0.29 x 100 is 28.999999999999996 in floats
        ),
        pytest.param(
            GpuCapRequest.of(ENV, mib=6000),
            GpuInfo("GPU-80", 0, "A100", 81920),
            GpuCap(GpuShare("GPU-80", 0.073242, 6000), ENV, 81920),
            id="mib-fraction-never-above",  # 0.0732421875, rounded down
        ),
        pytest.param(
            GpuCapRequest.of(FLAG, fraction=0.5),
            None,
            GpuCap(GpuShare(None, 0.5, None), FLAG, None),
            id="fraction-no-gpu",
        ),
        pytest.param(
            GpuCapRequest.of(ENV, mib=4096),
            None,
            GpuCap(GpuShare(None, None, 4096), ENV, None),
            id="mib-no-gpu",
        ),
        pytest.param(
            GpuCapRequest.of(FLAG, mib=10**9),
            None,
            GpuCap(GpuShare(None, None, 10**9), FLAG, None),
            id="huge-mib-no-gpu-not-checked",
        ),
        pytest.param(
            GpuCapRequest.of(NONE),
            GPU0,
            GpuCap(GpuShare(UUID0), NONE, 11441),
            id="no-request-with-gpu",
        ),
        pytest.param(
            GpuCapRequest.of(NONE),
            None,
            GpuCap(GpuShare(None), NONE, None),
            id="no-request-no-gpu",
        ),
    ],
)
def test_resolve_cap(request_: GpuCapRequest, gpu: GpuInfo | None, expected: GpuCap) -> None:
    cap = resolve_cap(request_, gpu)
    assert cap == expected
    assert cap.enforced is False


@pytest.mark.parametrize(
    ("mib", "gpu"),
    [
        pytest.param(1001, SMALL, id="one-over"),
        pytest.param(16000, GPU0, id="k80"),
    ],
)
def test_resolve_cap_mib_over_gpu_memory(mib: int, gpu: GpuInfo) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_cap(GpuCapRequest.of(FLAG, mib=mib), gpu)
    message = info.value.message
    assert str(mib) in message
    assert str(gpu.memory_mib) in message
    assert gpu.name in message


def test_resolve_cap_refuses_a_share_under_a_mib() -> None:
    # TensorFlow would be given memory_limit=0; the cap cannot work, so serve does not start.
    with pytest.raises(ConfigError, match="under 1 MiB"):
        resolve_cap(GpuCapRequest.of(FLAG, fraction=0.0001), SMALL)


def test_parse_then_resolve_env_mib_wins_end_to_end() -> None:
    request = _request(None, None, "0.9", "500")
    assert resolve_cap(request, SMALL) == GpuCap(GpuShare("GPU-small", 0.5, 500), ENV, 1000)


# --- apply_onnxruntime -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "gpu", "cuda", "enforced"),
    [
        # onnxruntime's CUDA provider, a GPU and a cap: its sessions hold it.
        (GpuCapRequest.of(FLAG, mib=2048), GPU0, True, True),
        (GpuCapRequest.of(ENV, fraction=0.25), GPU0, True, True),
        # No CUDA provider (onnxruntime's CPU build): recorded, not enforced.
        (GpuCapRequest.of(FLAG, mib=2048), GPU0, False, False),
        # No GPU: nothing to run on.
        (GpuCapRequest.of(FLAG, mib=2048), None, True, False),
        # No cap: the CPU provider, as without a GPU.
        (GpuCapRequest.of(NONE), GPU0, True, False),
    ],
)
def test_apply_onnxruntime(
    request_: GpuCapRequest, gpu: GpuInfo | None, cuda: bool, enforced: bool
) -> None:
    cap = resolve_cap(request_, gpu)
    applied = apply_onnxruntime(cap, cuda)
    assert applied.enforced is enforced
    assert applied.share == cap.share and applied.source is cap.source  # the figures unchanged
