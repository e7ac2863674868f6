"""The example architectures in plain ``torch.nn`` with random weights, saved as TorchScript.

Plain ``torch.nn`` rather than torchvision because torchvision has no CPU wheel matching every
torch build, and a model server must not need it at serve time anyway: TorchScript carries the
code with the weights. The architectures follow the Keras applications the TensorFlow builds use
(same layers, widths and strides, NHWC ``images`` input permuted to NCHW inside ``forward``), so
a packing decision measured on one framework's build transfers to the other's.

TorchScript has no signature names, so ``signature.json`` next to ``model.pt`` declares the
TF Serving-shaped signature (input and output names, dtypes, ``-1`` batch dimension) that the
torch backend serves; ``forward`` takes the inputs positionally in the sidecar's order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from sharedserve.models.spec import ExampleModelSpec

__all__ = ["MODEL_FILE", "SIGNATURE_FILE", "save_torchscript"]

MODEL_FILE = "model.pt"
SIGNATURE_FILE = "signature.json"

_CLASSES = 1000
_TINY_HIDDEN = 16
_TINY_CLASSES = 4


class Tiny(nn.Module):
    """Linear 8 -> 16, ReLU, Linear 16 -> 4, softmax: the same math as the Keras ``tiny``."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(features, _TINY_HIDDEN)
        self.out = nn.Linear(_TINY_HIDDEN, _TINY_CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        return torch.softmax(self.out(torch.relu(self.hidden(x))), dim=1)


def _conv_bn(
    cin: int,
    cout: int,
    kernel: int,
    stride: int = 1,
    *,
    groups: int = 1,
    act: nn.Module | None = None,
) -> nn.Sequential:
    """Conv (no bias: BatchNorm follows) + BatchNorm + optional activation."""
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act is not None:
        layers.append(act)
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand, 3x3 depthwise, 1x1 linear projection, residual if same."""

    def __init__(self, cin: int, cout: int, stride: int, expansion: int) -> None:
        super().__init__()
        hidden = cin * expansion
        layers: list[nn.Module] = []
        if expansion != 1:
            layers.append(_conv_bn(cin, hidden, 1, act=nn.ReLU6(inplace=True)))
        layers.append(
            _conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6(inplace=True))
        )
        layers.append(_conv_bn(hidden, cout, 1))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.block(x)
        if self.residual:
            return x + out
        return out


# (expansion t, output channels c, repeats n, first stride s), as in the MobileNetV2 paper.
_MOBILENET_V2_STAGES = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def _mobilenet_v2_features() -> tuple[nn.Sequential, int]:
    layers: list[nn.Module] = [_conv_bn(3, 32, 3, 2, act=nn.ReLU6(inplace=True))]
    cin = 32
    for expansion, cout, repeats, stride in _MOBILENET_V2_STAGES:
        for i in range(repeats):
            layers.append(InvertedResidual(cin, cout, stride if i == 0 else 1, expansion))
            cin = cout
    layers.append(_conv_bn(cin, 1280, 1, act=nn.ReLU6(inplace=True)))
    return nn.Sequential(*layers), 1280


class Bottleneck(nn.Module):
    """ResNet-50 block: 1x1 reduce, 3x3, 1x1 expand (x4), projection shortcut when shapes change.

    The stride sits on the first 1x1 conv, as in the ResNet paper and Keras' ResNet50 (torchvision
    moves it to the 3x3, "v1.5"), so the torch and TensorFlow builds do the same work.
    """

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = width * self.expansion
        self.block = nn.Sequential(
            _conv_bn(cin, width, 1, stride, act=nn.ReLU(inplace=True)),
            _conv_bn(width, width, 3, act=nn.ReLU(inplace=True)),
            _conv_bn(width, cout, 1),
        )
        self.shortcut = (
            _conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else nn.Identity()
        )
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.relu(self.block(x) + self.shortcut(x))
        return out


def _resnet50_features() -> tuple[nn.Sequential, int]:
    layers: list[nn.Module] = [
        _conv_bn(3, 64, 7, 2, act=nn.ReLU(inplace=True)),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 64
    for width, repeats, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(repeats):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * Bottleneck.expansion
    return nn.Sequential(*layers), cin


class ImageClassifier(nn.Module):
    """NHWC float images (TF Serving's layout) -> class probabilities."""

    def __init__(self, features: nn.Sequential, channels: int) -> None:
        super().__init__()
        self.features = features
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(channels, _CLASSES)

    def forward(self, images: Tensor) -> Tensor:
        x = self.features(images.permute(0, 3, 1, 2))
        logits = self.classifier(torch.flatten(self.pool(x), 1))
        return torch.softmax(logits, dim=1)


def build_module(spec: ExampleModelSpec) -> nn.Module:
    """The eager module for ``spec``, in eval mode, with the current RNG's random weights."""
    if spec.name == "tiny":
        (features,) = spec.input_shape
        model: nn.Module = Tiny(features)
    elif spec.name == "mobilenet_v2":
        model = ImageClassifier(*_mobilenet_v2_features())
    elif spec.name == "resnet50":
        model = ImageClassifier(*_resnet50_features())
    else:
        raise ValueError(f"no torch architecture for {spec.name!r}")
    return model.eval()


def signature_document(spec: ExampleModelSpec) -> dict[str, Any]:
    """The ``signature.json`` body for ``spec``: one float32 input, one float32 output."""
    classes = _TINY_CLASSES if spec.name == "tiny" else _CLASSES
    return {
        "signature_name": "serving_default",
        "inputs": {spec.input_name: {"dtype": "DT_FLOAT", "shape": [-1, *spec.input_shape]}},
        "outputs": {spec.output_name: {"dtype": "DT_FLOAT", "shape": [-1, classes]}},
    }


def save_torchscript(spec: ExampleModelSpec, path: Path, *, seed: int = 0) -> None:
    """Script ``spec``'s architecture and write ``path/model.pt`` and ``path/signature.json``.

    ``path`` must not exist yet (it is created). Seeding happens on a forked RNG so building a
    model does not reset the caller's random stream.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_module(spec)
    scripted = torch.jit.script(model)
    path.mkdir(parents=True)
    torch.jit.save(scripted, str(path / MODEL_FILE))
    (path / SIGNATURE_FILE).write_text(json.dumps(signature_document(spec), indent=2) + "\n")
