"""The PyTorch zoo's models: what each is, how it is built with random weights (``build``), and the
manifest entry (``Record``) that both zoos' exporters write. Standard library only at import, so
that the TensorFlow exporter's environment can read ``Record`` without PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SEED = 0


@dataclass(frozen=True)
class Model:
    """One network: how to build it, what it takes, whether its TorchScript export is dynamic."""

    name: str
    input_shape: tuple[int, ...]
    dynamic_batch: bool
    kwargs: dict[str, Any] = field(default_factory=dict)
    kind: str = "classification"  # classification, segmentation, bert_layer, transformer_encoder


@dataclass
class Record:
    """One manifest entry."""

    file: str
    model: str
    exporter: str
    opset: int | None
    dynamic_batch: bool
    input_shape: list[int]
    output_depends_on_input: bool | None = None
    export_seconds: float | None = None
    error: str | None = None
    output_shape: list[int] | None = None
    output_max_abs_diff: float | None = None
    reinitialized_zero_weights: list[str] = field(default_factory=list)
    data_files: list[str] = field(default_factory=list)
    bytes: int = 0
    build_kwargs: dict[str, Any] = field(default_factory=dict)


IMG = (1, 3, 224, 224)


MODELS: list[Model] = [
    Model("resnet18", IMG, True),
    Model("resnet50", IMG, False),
    Model("mobilenet_v2", IMG, True),
    Model("mobilenet_v3_large", IMG, False),
    Model("mobilenet_v3_small", IMG, True),
    Model("efficientnet_b0", IMG, True),
    Model("efficientnet_v2_s", IMG, False),
    Model("regnet_y_400mf", IMG, True),
    Model("regnet_x_400mf", IMG, False),
    Model("shufflenet_v2_x1_0", IMG, True),
    Model("squeezenet1_1", IMG, False),
    Model("densenet121", IMG, True),
    Model("googlenet", IMG, False, {"aux_logits": False, "init_weights": False}),
    Model("inception_v3", (1, 3, 299, 299), True, {"aux_logits": False, "init_weights": False}),
    Model("mnasnet1_0", IMG, False),
    Model("convnext_tiny", IMG, True),
    Model("vgg11", IMG, False),
    Model("alexnet", IMG, True),
    Model("resnext50_32x4d", IMG, False),
    Model("wide_resnet50_2", IMG, True),
    Model("vit_b_16", IMG, False),
    Model("swin_t", IMG, True),
    Model("maxvit_t", IMG, False),
    Model("fcn_resnet50", IMG, True, {"aux_loss": False, "weights_backbone": None}, "segmentation"),
    Model(
        "deeplabv3_mobilenet_v3_large",
        IMG,
        False,
        {"aux_loss": False, "weights_backbone": None},
        "segmentation",
    ),
    Model(
        "deeplabv3_resnet50",
        IMG,
        True,
        {"aux_loss": False, "weights_backbone": None},
        "segmentation",
    ),
    Model("lraspp_mobilenet_v3_large", IMG, False, {"weights_backbone": None}, "segmentation"),
    Model("bert_layer", (1, 128, 768), True, {}, "bert_layer"),
    Model("transformer_encoder", (1, 64, 256), False, {}, "transformer_encoder"),
]


def build(model: Model) -> Any:
    import torch
    import torchvision

    torch.manual_seed(SEED)  # the same weights for every file of one model
    if model.kind == "classification":
        return torchvision.models.get_model(model.name, weights=None, **model.kwargs)
    if model.kind == "segmentation":
        net = torchvision.models.get_model(model.name, weights=None, **model.kwargs)

        class OutOnly(torch.nn.Module):
            """Return only the 'out' tensor of a torchvision segmentation model's dict."""

            def __init__(self, inner: torch.nn.Module) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.inner(x)["out"]

        return OutOnly(net)
    if model.kind == "bert_layer":
        try:
            from transformers import BertConfig
            from transformers.models.bert.modeling_bert import BertLayer
        except ImportError:
            return torch.nn.TransformerEncoderLayer(
                768, 12, 3072, activation="gelu", batch_first=True
            )
        config = BertConfig(
            hidden_size=768,
            num_attention_heads=12,
            intermediate_size=3072,
            attn_implementation="eager",
        )
        layer = BertLayer(config)
        layer.apply(_bert_init(config.initializer_range))
        return layer
    if model.kind == "transformer_encoder":
        layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, batch_first=True)
        encoder = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        for clone in encoder.layers:  # the layers are deep copies of one: give each its own
            clone.self_attn._reset_parameters()
            clone.linear1.reset_parameters()
            clone.linear2.reset_parameters()
        return encoder
    raise ValueError(model.kind)


def _bert_init(std: float) -> Callable[[Any], None]:
    """BERT's own init (BertPreTrainedModel._init_weights), which a bare BertLayer skips."""
    import torch

    def init(m: torch.nn.Module) -> None:
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.normal_(m.weight, std=std)
            torch.nn.init.zeros_(m.bias)
        elif isinstance(m, torch.nn.LayerNorm):
            torch.nn.init.ones_(m.weight)
            torch.nn.init.zeros_(m.bias)

    return init
