"""Checkpoints in the compressed-tensors format: one packing with the book's, and equal logits after a round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import servebook
from servebook import checkpoint, qmodel, quant, smallmodel

compressed_tensors = pytest.importorskip("compressed_tensors")
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32  # noqa: E402


def test_the_books_int4_packing_is_compressed_tensors_packing():
    q = torch.randint(-8, 8, (8, 64), dtype=torch.int8, generator=torch.Generator().manual_seed(0))
    ours = checkpoint.pack_int32(q.int() + 8)
    assert torch.equal(ours, pack_to_int32(q, 4))
    assert torch.equal(ours.view(torch.uint8), quant.pack_int4((q.int() + 8).to(torch.uint8)))
    assert torch.equal(checkpoint.unpack_int32(ours, 64).int() - 8, q.int())
    zero = q[:, :3].T.contiguous()      # zero points are packed along the output dimension
    assert torch.equal(checkpoint.pack_int32((q[:, :3].int() + 8).T.contiguous()).T,
                       pack_to_int32(q[:, :3].contiguous(), 4, packed_dim=0)) and zero.shape == (3, 8)


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = smallmodel.load("tiny-llama")
    ids = torch.randint(0, model.config.vocab_size, (2, 48), generator=torch.Generator().manual_seed(1))
    return model, tokenizer, ids


@pytest.mark.parametrize(("bits", "group_size", "mapping"), [
    (4, 128, "asymmetric"), (4, "channel", "asymmetric"), (8, "channel", "symmetric")])
def test_a_saved_model_loads_with_compressed_tensors_and_gives_equal_logits(tiny, tmp_path, bits, group_size,
                                                                              mapping):
    model, tokenizer, ids = tiny
    report = qmodel.quantize_model(model, "rtn", bits=bits, group_size=group_size, mapping=mapping)
    checkpoint.save_compressed(report.model, tmp_path, tokenizer)
    loaded = checkpoint.load_decompressed(tmp_path)
    for name, layer in qmodel.linear_layers(loaded).items():
        ours = report.model.get_submodule(name)
        # compressed-tensors computes s (q - z) in the FP16 scale's dtype: our weight rounded to FP16
        assert torch.equal(layer.weight, ours.dequantized_weight(torch.float16).float()), name
    with torch.no_grad():
        theirs, ours = loaded(input_ids=ids).logits, report.model(input_ids=ids).logits
    # the weights are equal bit for bit; the logits differ by what FP16 rounding of W_hat moves
    assert float((theirs - ours).abs().max()) < 0.01 * float(ours.abs().max())


@pytest.mark.parametrize("mapping", ["asymmetric", "symmetric"])
def test_int4_weights_are_written_as_the_layer_stores_them(tiny, tmp_path, mapping):
    from safetensors.torch import load_file

    model, _, _ = tiny
    report = qmodel.quantize_model(model, "rtn", bits=4, group_size=128, mapping=mapping)
    checkpoint.save_compressed(report.model, tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    for name in report.layers:
        layer = report.model.get_submodule(name)
        written = tensors[f"{name}.weight_packed"]
        assert torch.equal(written.view(torch.uint8), layer.qweight), name       # the layer's own bytes
        signed = layer.codes() - (8 if mapping == "asymmetric" else 0)
        assert torch.equal(written, pack_to_int32(signed.to(torch.int8), 4)), name   # compressed-tensors' packing


def test_a_checkpoint_is_the_same_bytes_wherever_the_book_is_installed(tiny, tmp_path):
    model, tokenizer, _ = tiny
    report = qmodel.quantize_model(model, "rtn", bits=4, group_size=128)
    checkpoint.save_compressed(report.model, tmp_path, tokenizer)
    installed = str(Path(servebook.__file__).parent)
    for path in tmp_path.iterdir():
        assert installed.encode() not in path.read_bytes(), path.name  # no path of this machine
    assert "_name_or_path" not in json.loads((tmp_path / "config.json").read_text())


def test_an_fp8_checkpoint_round_trips_its_weights(tiny, tmp_path):
    model, _, _ = tiny
    checkpoint.save_fp8(model, tmp_path)
    loaded = checkpoint.load_decompressed(tmp_path)
    w = model.model.layers[1].mlp.down_proj.weight.detach()
    expected = quant.fake_quantize_fp8(w, quant.choose_fp8_scale(w, axis=0))
    assert torch.equal(loaded.model.layers[1].mlp.down_proj.weight, expected)


def test_only_quantized_models_are_saved(tiny, tmp_path):
    model, _, _ = tiny
    with pytest.raises(ValueError, match="no QuantizedLinear layers"):
        checkpoint.save_compressed(model, tmp_path)
    with pytest.raises(ValueError, match="multiple of 8"):
        checkpoint.pack_int32(torch.zeros(2, 12, dtype=torch.int32))
