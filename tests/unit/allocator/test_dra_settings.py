"""DraSettings.validate, AllocatorSettings in either mode, and the CLI refusing mixed modes.

The CLI cases fail validation before anything is started; none of them needs a kubelet, an API
server or a GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sharedserve.allocator.dra.settings import DraSettings
from sharedserve.allocator.dra.slices import SliceOptions
from sharedserve.allocator.settings import AllocatorSettings, Api
from sharedserve.cli import app
from sharedserve.cli.allocator import _check_mode
from sharedserve.errors import ConfigError

NODE = "gpu-node-1.example.com"


@pytest.mark.parametrize(
    ("settings", "fragments"),
    [
        pytest.param(DraSettings(), ["--node-name", "NODE_NAME"], id="no-node-name"),
        pytest.param(DraSettings(node_name=""), ["NODE_NAME"], id="empty-node-name"),
        pytest.param(DraSettings(node_name="Node-1"), ["--node-name", "'Node-1'"], id="uppercase"),
        pytest.param(DraSettings(node_name="node_1"), ["--node-name"], id="underscore"),
        pytest.param(DraSettings(node_name="node-"), ["--node-name"], id="trailing-dash"),
        pytest.param(DraSettings(node_name="a" * 254), ["--node-name"], id="too-long"),
        # The slice's name is the node's plus "-gpu.sharedserve.io", itself at most 253.
        pytest.param(DraSettings(node_name="a" * 240), ["--node-name"], id="slice-name-too-long"),
        pytest.param(
            DraSettings(node_name=NODE, plugin_dir=Path("p" * 100)),
            ["--dra-plugin-dir", "dra.sock", "107"],
            id="plugin-dir-too-long",
        ),
        pytest.param(
            DraSettings(node_name=NODE, registry_dir=Path("r" * 100)),
            ["--plugin-registry-dir", "-reg.sock", "107"],
            id="registry-dir-too-long",
        ),
        pytest.param(
            DraSettings(node_name=NODE, slices=SliceOptions(slots=17)), ["--slots"], id="slots"
        ),
        pytest.param(
            DraSettings(node_name=NODE, api_timeout_s=0), ["API timeout"], id="api-timeout"
        ),
    ],
)
def test_dra_settings_refused(settings: DraSettings, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as raised:
        settings.validate()
    for fragment in fragments:
        assert fragment in raised.value.message


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param(DraSettings(node_name=NODE), id="defaults"),
        pytest.param(DraSettings(node_name="n"), id="one-letter"),
        pytest.param(DraSettings(node_name="a" * 234), id="longest"),
        pytest.param(DraSettings(node_name=NODE, slices=SliceOptions(slots=16)), id="slots"),
        pytest.param(DraSettings(node_name=NODE, plugin_dir=Path("p" * 98)), id="long-dir"),
    ],
)
def test_dra_settings_accepted(settings: DraSettings) -> None:
    settings.validate()


def test_allocator_settings_validate_dra_only_in_dra_mode() -> None:
    AllocatorSettings(api=Api.DEVICE_PLUGIN).validate()  # no node name needed
    AllocatorSettings(api=Api.DEVICE_PLUGIN, dra=DraSettings(node_name="Bad")).validate()
    AllocatorSettings(api=Api.DRA, dra=DraSettings(node_name=NODE)).validate()
    with pytest.raises(ConfigError, match="NODE_NAME"):
        AllocatorSettings(api=Api.DRA).validate()
    with pytest.raises(ConfigError, match="--slots"):
        AllocatorSettings(api=Api.DRA, dra=DraSettings(NODE, slices=SliceOptions(0))).validate()


@pytest.mark.parametrize(
    ("api", "device_plugin_only", "dra_only", "expected"),
    [
        pytest.param(Api.DRA, {"--replicas": True}, {"--slots": True}, "--replicas", id="dra"),
        pytest.param(Api.DEVICE_PLUGIN, {"--mps": True}, {"--slots": True}, "--slots", id="dp"),
        pytest.param(
            Api.DEVICE_PLUGIN,
            {},
            {"--kubeconfig": True, "--cdi-dir": False, "--slots": True},
            "--kubeconfig, --slots only applies to --api dra",
            id="dp-two-flags",
        ),
    ],
)
def test_check_mode_refuses(
    api: Api, device_plugin_only: dict[str, bool], dra_only: dict[str, bool], expected: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        _check_mode(api, device_plugin_only, dra_only)
    assert expected in raised.value.message


@pytest.mark.parametrize("api", list(Api))
def test_check_mode_accepts_own_flags(api: Api) -> None:
    own = {"--flag": True}
    if api is Api.DRA:
        _check_mode(api, {"--replicas": False}, own)
    else:
        _check_mode(api, own, {"--slots": False})


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        pytest.param(
            ["--api", "dra", "--node-name", NODE, "--replicas", "2"],
            ["--replicas", "only applies to the device plugin"],
            id="dra-replicas",
        ),
        pytest.param(
            ["--api", "dra", "--node-name", NODE, "--policy", "spread"],
            ["--policy"],
            id="dra-policy",
        ),
        pytest.param(["--slots", "4"], ["--slots", "only applies to --api dra"], id="dp-slots"),
        pytest.param(
            ["--memory-step-mib", "512"], ["--memory-step-mib", "--api dra"], id="dp-step"
        ),
        pytest.param(["--api", "dra"], ["--node-name", "NODE_NAME"], id="dra-no-node-name"),
        pytest.param(
            ["--api", "dra", "--node-name", NODE, "--slots", "0"], ["--slots"], id="dra-slots-0"
        ),
    ],
)
def test_cli_refuses_before_starting(args: list[str], fragments: list[str]) -> None:
    # NODE_NAME unset: the case without --node-name must not pick one up from the environment.
    result = CliRunner().invoke(app, ["allocator", *args], env={"NODE_NAME": None})
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError), result.output
    for fragment in fragments:
        assert fragment in result.exception.message
