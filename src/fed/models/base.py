"""Every registered model is a :class:`SplitModel`: ``forward(x) == head(features(x))``, cut at a named layer.

Methods that work on representations use the cut: MOON, FedDecorr, CCVR and FedGen take the penultimate
features; FLea shares activations of an intermediate layer (``cut_layer`` names where ``features`` stops).
"""

from __future__ import annotations

import torch
from torch import nn


class SplitModel(nn.Module):
    cut_layer: str = ""  # the module whose output ``features`` returns, e.g. "body.1" or "net.layer4"

    def features(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def head(self, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def head_module(self) -> nn.Module:
        """The module(s) ``head`` applies (CCVR re-trains them on virtual features)."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class SequentialSplit(SplitModel):
    """A model given as two sequential parts: ``body`` (input → cut) and ``classifier`` (cut → logits)."""

    def __init__(self, body: nn.Module, classifier: nn.Module, cut_layer: str = "body"):
        super().__init__()
        self.body, self.classifier, self.cut_layer = body, classifier, cut_layer

    def features(self, x):
        return self.body(x)

    def head(self, h):
        return self.classifier(h)

    def head_module(self):
        return self.classifier


def feature_dim(model: SplitModel, input_shape: tuple[int, ...]) -> int:
    """Size of the flattened ``features`` output for one input of ``input_shape`` (sizes projection heads)."""
    was = model.training
    with torch.no_grad():
        d = model.eval().features(torch.zeros(2, *input_shape)).flatten(1).shape[1]
    model.train(was)
    return d
