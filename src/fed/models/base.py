"""Every registered model is a :class:`SplitModel`, split two ways:

- at its cut: ``forward(x) == head(features(x))``. FLea shares the activations of an intermediate layer
  (``cut_layer`` names where ``features`` stops), and MOON and FedDPMS work on ``features``;
- before its last linear layer: ``forward(x) == classify(embed(x))``. ``embed`` is the penultimate representation
  that FedDecorr decorrelates, FedBR projects, FedGen generates and CCVR calibrates the classifier on. Where the cut
  is the penultimate layer (Fed-ZDA's CNNs, ResNet), both splits coincide.
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

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """The penultimate representation, flattened (the input of the last linear layer)."""
        return self.features(x).flatten(1)

    def classify(self, z: torch.Tensor) -> torch.Tensor:
        """Logits from ``embed``'s output: the last linear layer."""
        return self.classifier_module()(z)

    def classifier_module(self) -> nn.Module:
        """The last linear layer (CCVR re-trains it); by default the whole head, for models cut before it."""
        return self.head_module()

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

    def _layers(self) -> tuple[nn.Module, nn.Module]:
        """The classifier split into (everything before its last linear layer, that layer)."""
        if isinstance(self.classifier, nn.Sequential) and isinstance(self.classifier[-1], nn.Linear):
            return self.classifier[:-1], self.classifier[-1]
        return nn.Identity(), self.classifier

    def embed(self, x):
        return self._layers()[0](self.features(x)).flatten(1)

    def classifier_module(self):
        return self._layers()[1]


def feature_dim(model: SplitModel, input_shape: tuple[int, ...], of: str = "features") -> int:
    """Size of the flattened ``features`` (or ``embed``) output for one input of ``input_shape`` (sizes projection
    heads and generators)."""
    was = model.training
    with torch.no_grad():
        d = getattr(model.eval(), of)(torch.zeros(2, *input_shape)).flatten(1).shape[1]
    model.train(was)
    return d


def stochastic(model: nn.Module) -> bool:
    """Whether a training forward pass draws random numbers (a dropout layer with p > 0)."""
    return any(isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules())
