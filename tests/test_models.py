"""Every registered model has a cut: features(x) then head(h) is forward(x), and cut_layer names a real module."""

import pytest
import torch

from fed.models import MODELS, build_model

IMAGES = [(1, 28, 28), (3, 32, 32)]
SHAPES = {"harnet": [(1, 128, 3)]}  # a sensor window, not an image


@pytest.mark.parametrize("name,shape", [(n, s) for n in sorted(MODELS) for s in SHAPES.get(n, IMAGES)])
def test_head_of_features_is_forward(name, shape):
    torch.manual_seed(0)
    model = build_model(name, shape[0], 10, shape[1], shape[2]).eval()
    x = torch.randn(3, *shape)
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


def test_flea_audio_and_sensor_nets_cut_after_their_second_block():
    audio = build_model("audionet", 2, 10, 64, 344)
    assert tuple(audio.features(torch.randn(2, 2, 64, 344)).shape) == (2, 16, 16, 86)  # UrbanSound8K log-mel
    har = build_model("harnet", 1, 6, 128, 3).eval()
    x = torch.randn(2, 1, 128, 3)
    assert har.features(x).shape[1] == 128 and tuple(har(x).shape) == (2, 6)  # UCI-HAR window, 128 channels
    assert tuple(build_model("audionet", 1, 10, 28).features(torch.randn(2, 1, 28, 28)).shape) == (2, 16, 7, 7)
