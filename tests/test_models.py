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
        z = model.embed(x)  # the other split: before the last linear layer
        assert z.dim() == 2 and torch.allclose(model.classify(z), model(x), atol=1e-6)
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


def test_flea_s_pre_cut_block_is_torchvision_s_not_the_authors_own():
    """docs/deviations.md, MobileNetV2 row: before the cut, torchvision's stem and first block (ReLU6, no shortcut)
    hold 1,824 parameters; the authors' own MobileNetV2 (XTxiatong/FLea b85be07, models.py: ReLU, a 1×1 expansion and a
    projection shortcut) 3,456. Whole model: ours 2,236,682, theirs 2,296,922."""
    model = build_model("mobilenetv2_flea", 3, 10, 32)
    pre_cut = model.net.features[: model.cut + 1]
    assert sum(p.numel() for p in pre_cut.parameters()) == 1824
    assert sum(p.numel() for p in model.parameters()) == 2236682
    activations = {type(m) for m in pre_cut.modules() if isinstance(m, (torch.nn.ReLU, torch.nn.ReLU6))}
    assert activations == {torch.nn.ReLU6}


def test_flea_audio_and_sensor_nets_cut_after_their_second_block():
    audio = build_model("audionet", 2, 10, 64, 344)
    assert tuple(audio.features(torch.randn(2, 2, 64, 344)).shape) == (2, 16, 16, 86)  # UrbanSound8K log-mel
    har = build_model("harnet", 1, 6, 128, 3).eval()
    x = torch.randn(2, 1, 128, 3)
    assert har.features(x).shape[1] == 128 and tuple(har(x).shape) == (2, 6)  # UCI-HAR window, 128 channels
    assert tuple(build_model("audionet", 1, 10, 28).features(torch.randn(2, 1, 28, 28)).shape) == (2, 16, 7, 7)
    assert tuple(audio.embed(torch.randn(2, 2, 64, 344)).shape) == (2, 64)  # pooled, before the FC layer


def test_the_dpms_cnn_cut_after_block_2_is_the_same_network_split_earlier():
    """FLea's kind of cut on the head-to-head's model: same parameters, initialisation and outputs; the features are
    block 2's activations (32 × 14 × 14), and FedDPMS refuses it (its VAE is built on the whole trunk)."""
    from fed.models.vae import vae_modules

    torch.manual_seed(0)
    trunk = build_model("cnn_dpms_fmnist", 1, 10, 28).eval()
    torch.manual_seed(0)
    block2 = build_model("cnn_dpms_fmnist_block2", 1, 10, 28).eval()
    assert [p.shape for p in trunk.parameters()] == [p.shape for p in block2.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(trunk.parameters(), block2.parameters()))
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        assert torch.equal(trunk(x), block2(x))
        assert tuple(block2.features(x).shape) == (2, 32, 14, 14) and tuple(trunk.features(x).shape) == (2, 3136)
        assert torch.equal(block2.embed(x), trunk.embed(x))  # the 32-d bottleneck: CCVR's input either way
    with pytest.raises(ValueError, match="VAE trunk"):
        vae_modules(block2, (1, 28, 28))


def test_embed_is_the_input_of_the_last_linear_layer():
    for name, shape, dim in [("mobilenetv2_flea", (3, 32, 32), 1280), ("cnn_dafl", (1, 28, 28), 128)]:
        model = build_model(name, shape[0], 10, shape[1]).eval()
        seen = {}
        last = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
        handle = last.register_forward_hook(lambda m, i, o, seen=seen: seen.setdefault("z", i[0]))
        with torch.no_grad():
            z = model.embed(torch.randn(2, *shape))
            model(torch.randn(2, *shape))
        handle.remove()
        assert z.shape == seen["z"].shape == (2, dim), name


def test_prediction_does_not_depend_on_the_batch_it_is_cut_into():
    # fed.training.predict batches by PREDICT_BATCH for speed (benchmarks/predict_batch.py): the same labels as one
    # batch of everything, on the head-to-head's CNN in eval mode (BatchNorm's running statistics)
    from fed.training import PREDICT_BATCH, predict

    torch.manual_seed(0)
    model = build_model("cnn_dpms_fmnist", num_classes=10, in_channels=1, image_size=28)
    model.train()(torch.randn(64, 1, 28, 28))  # running statistics away from their initial values
    x = torch.randn(3 * PREDICT_BATCH + 5, 1, 28, 28)  # a last, partial batch
    with torch.no_grad():
        whole = model.eval()(x).argmax(1)
    assert torch.equal(predict(model, x), whole)
    assert torch.equal(predict(model, x, batch=7), whole)


def test_the_dafl_width_study_scales_every_layer_of_the_classifier():
    """cnn_dafl's widths (16, 32, 128) halved and quartered, the shape unchanged: parameters by hand, at 28 × 28
    (4 × 4 after two unpadded 5 × 5 convolutions and pools): conv 25·c1 + c1, conv 25·c1·c2 + c2, FC 16·c2·f + f,
    FC 10·f + 10."""

    def count(c1, c2, f):
        return 25 * c1 + c1 + 25 * c1 * c2 + c2 + 16 * c2 * f + f + 10 * f + 10

    for name, widths in (("cnn_dafl", (16, 32, 128)), ("cnn_dafl_half", (8, 16, 64)), ("cnn_dafl_quarter", (4, 8, 32))):
        model = build_model(name, 1, 10, 28)
        assert sum(p.numel() for p in model.parameters()) == count(*widths), name
        assert model.features(torch.zeros(2, 1, 28, 28)).shape == (2, 16 * widths[1])


def test_the_authors_init_draws_every_conv_and_linear_weight_xavier_uniform_with_the_relu_gain():
    """FedDPMS' code re-draws each Conv2d and Linear weight from U(±√2·√(6 / (fan_in + fan_out))) (its
    train.py:213-215); biases and BatchNorm keep PyTorch's; "torch" changes nothing."""
    from fed.models import initialise

    torch.manual_seed(0)
    model = build_model("cnn_dpms_fmnist", 1, 10, 28)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    initialise(model, "torch", torch.Generator().manual_seed(1))
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    initialise(model, "xavier_relu", torch.Generator().manual_seed(1))
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    layers = [m for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert len(layers) == 5 and changed == {n + ".weight" for n, m in model.named_modules() if m in layers}
    for m in layers:
        fan_out, fan_in = m.weight.shape[0] * m.weight[0, 0].numel(), m.weight[0].numel()
        bound = 2**0.5 * (6 / (fan_in + fan_out)) ** 0.5  # e.g. Linear(3136, 32): 0.0616
        w = m.weight.detach()
        assert w.abs().max().item() <= bound and w.std().item() == pytest.approx(bound / 3**0.5, rel=0.1)
    with pytest.raises(ValueError, match="unknown init 'he'"):
        initialise(model, "he", torch.Generator())
    from fed.config import FLConfig

    preset = {k: FLConfig.defaults().get(k, 1) for k in FLConfig.PROTOCOL} | {"num_clients": 2, "init": "he"}
    with pytest.raises(ValueError, match=r"p: init='he' is not one of \['torch', 'xavier_relu'\]"):
        FLConfig.from_preset(preset, "fmnist", name="p")  # a bad setting is named before any run starts
