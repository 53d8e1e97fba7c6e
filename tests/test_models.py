"""Every registered model has a cut: features(x) then head(h) is forward(x), and cut_layer names a real module."""

import pytest
import torch

from fed.models import MODELS, build_model


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("channels,size", [(1, 28), (3, 32)])
def test_head_of_features_is_forward(name, channels, size):
    torch.manual_seed(0)
    model = build_model(name, channels, 10, size).eval()
    x = torch.randn(3, channels, size, size)
    with torch.no_grad():
        h = model.features(x)
        assert torch.equal(model.head(h), model(x))
    assert model.cut_layer in dict(model.named_modules())
    # the named layer's output is what features() returns (up to pooling/flattening at the penultimate cut)
    seen = {}
    handle = dict(model.named_modules())[model.cut_layer].register_forward_hook(lambda m, i, o: seen.setdefault("o", o))
    with torch.no_grad():
        model(x)
    handle.remove()
    assert seen["o"].flatten(1).shape[1] == h.flatten(1).shape[1] or seen["o"].shape[1] == h.shape[1]


def test_flea_cut_is_the_first_inverted_residual_block():
    model = build_model("mobilenetv2_flea", 3, 10, 32)
    assert tuple(model.features(torch.randn(2, 3, 32, 32)).shape) == (2, 16, 32, 32)  # FLea --layer 0
    assert tuple(build_model("mobilenetv2", 3, 10, 32).features(torch.randn(2, 3, 32, 32)).shape) == (2, 1280)
