"""The models of the real-model group, built from their constructors with random weights and
no downloads (timm with ``pretrained=False``; transformers from small configs).

Each builder returns a :class:`Case`: what check_model is given, and (for a model that
breaks) the same model with the fix a report prints applied.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .stubbed_timm import import_timm

timm = import_timm()
import transformers as tf  # noqa: E402  (after timm: see stubbed_timm)


@dataclasses.dataclass
class Case:
    fn: Callable[..., Any]
    inputs: tuple
    roots: dict[str, nn.Module]  # label -> module, as check_model names submodules
    kwargs: dict = dataclasses.field(default_factory=dict)
    wrt: str = "inputs"
    fix: str = ""  # what the printed fix must say, for a model that breaks
    fixed: Callable[[], contextlib.AbstractContextManager] | None = (
        None  # the fix, applied
    )
    fixed_fn: Callable[..., Any] | None = (
        None  # the model with the fix, if not a context
    )
    # wrt="embeddings": the modules whose outputs are differentiated
    embeddings: list[nn.Module] = dataclasses.field(default_factory=list)

    @property
    def parameters(self) -> list[torch.Tensor]:
        found = {id(p): p for m in self.roots.values() for p in m.parameters()}
        return [p for p in found.values() if p.requires_grad]


def math_attention() -> contextlib.AbstractContextManager:
    return sdpa_kernel(SDPBackend.MATH)


def module_case(model: nn.Module, *inputs: Any, **fields: Any) -> Case:
    return Case(model, inputs, {"": model}, **fields)


CASES: dict[str, Callable[[], Case]] = {}


def case(fn: Callable[[], Case]) -> Callable[[], Case]:
    CASES[fn.__name__] = fn
    return fn


# -- timm -------------------------------------------------------------------------------
@case
def timm_resnet18_zero_init_last():
    torch.manual_seed(0)
    model = timm.create_model(
        "resnet18", pretrained=False, num_classes=1, zero_init_last=True
    )
    return module_case(model, torch.randn(2, 3, 32, 32))


@case
def timm_efficientnet_b0_batch_2():
    torch.manual_seed(0)
    model = timm.create_model("efficientnet_b0", pretrained=False, num_classes=1)
    return module_case(model, torch.randn(2, 3, 32, 32))


class ReluSixGate(nn.Module):
    """The printed fix for hardsigmoid: ``F.relu6(x + 3) / 6``, the same function."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu6(x + 3) / 6


@case
def timm_mobilenetv3_small():
    torch.manual_seed(0)
    model = timm.create_model("mobilenetv3_small_050", pretrained=False, num_classes=1)
    fixed = copy.deepcopy(model)
    for module in list(fixed.modules()):
        for name, child in module.named_children():
            if isinstance(child, nn.Hardsigmoid):
                setattr(module, name, ReluSixGate())
    return module_case(model, torch.randn(2, 3, 32, 32), fix="F.relu6(x + 3) / 6",
                       fixed_fn=fixed)  # fmt: skip


@case
def timm_convnext_atto():
    torch.manual_seed(0)
    model = timm.create_model("convnext_atto", pretrained=False, num_classes=1)
    return module_case(model, torch.randn(1, 3, 32, 32))


@case
def timm_vit_fused_attention():
    torch.manual_seed(0)
    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, num_classes=1, img_size=16,
        patch_size=8, depth=2, embed_dim=16, num_heads=2,
    )  # fmt: skip
    return module_case(model, torch.randn(1, 3, 16, 16), fix="SDPBackend.MATH",
                       fixed=math_attention)  # fmt: skip


@case
def timm_deit_tiny():
    torch.manual_seed(0)
    model = timm.create_model(
        "deit_tiny_patch16_224", pretrained=False, num_classes=1, img_size=16,
        patch_size=8, depth=2, embed_dim=16, num_heads=2,
    )  # fmt: skip
    return module_case(model, torch.randn(1, 3, 16, 16), fix="SDPBackend.MATH",
                       fixed=math_attention)  # fmt: skip


@case
def timm_swin():
    torch.manual_seed(0)
    model = timm.create_model(
        "swin_tiny_patch4_window7_224", pretrained=False, num_classes=1, img_size=16,
        patch_size=4, window_size=2, embed_dim=8, depths=(1, 1), num_heads=(1, 2),
    )  # fmt: skip
    return module_case(model, torch.randn(1, 3, 16, 16), fix="SDPBackend.MATH",
                       fixed=math_attention)  # fmt: skip


# -- transformers -----------------------------------------------------------------------
def _embeds_case(model: nn.Module, width: int, fix: bool, **call: Any) -> Case:
    def fn(e):
        return model(inputs_embeds=e, **call).last_hidden_state

    return Case(fn, (torch.randn(1, 5, width),), {"model": model},
                fix="SDPBackend.MATH" if fix else "",
                fixed=math_attention if fix else None)  # fmt: skip


def _llama(impl: str) -> nn.Module:
    torch.manual_seed(0)
    config = tf.LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16,
        attn_implementation=impl,
    )  # fmt: skip
    return tf.LlamaModel(config)


@case
def llama_eager():
    return _embeds_case(_llama("eager"), 16, False)


@case
def llama_sdpa():
    return _embeds_case(_llama("sdpa"), 16, True)


@case
def llama_sdpa_use_cache():
    return _embeds_case(_llama("sdpa"), 16, True, use_cache=True)


def _t5(impl: str) -> nn.Module:
    torch.manual_seed(0)
    config = tf.T5Config(vocab_size=32, d_model=16, d_kv=8, d_ff=32, num_layers=2,
                         num_heads=2, attn_implementation=impl)  # fmt: skip
    return tf.T5EncoderModel(config)


@case
def t5_eager():
    return _embeds_case(_t5("eager"), 16, False)


@case
def t5_sdpa():
    return _embeds_case(_t5("sdpa"), 16, True)


def _bert(impl: str) -> nn.Module:
    torch.manual_seed(0)
    config = tf.BertConfig(
        vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16, attn_implementation=impl,
    )  # fmt: skip
    return tf.BertModel(config)


@case
def bert_lambda_inputs_embeds():
    bert = _bert("sdpa")
    case_ = Case(lambda e: bert(inputs_embeds=e).last_hidden_state,
                 (torch.randn(1, 5, 16),), {"bert": bert})  # fmt: skip
    return case_


@case
def bert_eager_with_attention_mask():
    bert = _bert("eager")
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    return Case(
        bert,
        (),
        {"": bert},
        kwargs={"inputs_embeds": torch.randn(1, 5, 16), "attention_mask": mask},
    )


def _gpt2(impl: str) -> nn.Module:
    torch.manual_seed(0)
    config = tf.GPT2Config(vocab_size=32, n_embd=16, n_layer=2, n_head=2, n_positions=16,
                           bos_token_id=0, eos_token_id=0,
                           attn_implementation=impl)  # fmt: skip
    return tf.GPT2Model(config)


@case
def gpt2_eager():
    return _embeds_case(_gpt2("eager"), 16, False)


@case
def gpt2_sdpa():
    return _embeds_case(_gpt2("sdpa"), 16, True)


def _vit(impl: str) -> nn.Module:
    torch.manual_seed(0)
    config = tf.ViTConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=32, image_size=8, patch_size=4,
                          attn_implementation=impl)  # fmt: skip
    return tf.ViTModel(config, add_pooling_layer=False)


@case
def hf_vit_eager():
    model = _vit("eager")
    return Case(lambda x: model(pixel_values=x).last_hidden_state,
                (torch.randn(1, 3, 8, 8),), {"model": model})  # fmt: skip


@case
def hf_vit_sdpa():
    model = _vit("sdpa")
    return Case(lambda x: model(pixel_values=x).last_hidden_state,
                (torch.randn(1, 3, 8, 8),), {"model": model},
                fix="SDPBackend.MATH", fixed=math_attention)  # fmt: skip


def _clip_vision(impl: str) -> nn.Module:
    torch.manual_seed(0)
    config = tf.CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                 num_attention_heads=2, image_size=8, patch_size=4,
                                 attn_implementation=impl)  # fmt: skip
    return tf.CLIPVisionModel(config)


@case
def clip_vision_eager():
    model = _clip_vision("eager")
    return Case(model, (torch.randn(1, 3, 8, 8),), {"": model})


@case
def clip_vision_sdpa():
    model = _clip_vision("sdpa")
    return Case(model, (torch.randn(1, 3, 8, 8),), {"": model}, fix="SDPBackend.MATH",
                fixed=math_attention)  # fmt: skip


@case
def bert_sdpa_with_attention_mask():
    bert = _bert("sdpa")
    mask = torch.tensor([[1, 1, 1, 0, 0]])
    return Case(
        bert,
        (),
        {"": bert},
        fix="SDPBackend.MATH",
        fixed=math_attention,
        kwargs={"inputs_embeds": torch.randn(1, 5, 16), "attention_mask": mask},
    )


# -- transformers text models given token ids ---------------------------------------------
# Called as users call them: model(input_ids), with an attention mask, with use_cache=True,
# labels. wrt=None: check_model's default, the parameters (no input is floating point);
# wrt="embeddings": the input embedding's outputs, the modules named here by hand. Built in
# train mode (as a constructor leaves them) or eval (as from_pretrained does): on the CPU,
# SDPA runs its math kernel under dropout (BERT, GPT-2, T5 in train mode) and its flash
# kernel otherwise, whose backward has no derivative.
IDS = torch.tensor([[1, 5, 7, 3, 2], [4, 9, 2, 6, 8]])
MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
TARGET_IDS = torch.tensor([[0, 3, 1], [0, 8, 4]])  # T5's decoder inputs, or labels


def _text_case(model: nn.Module, breaks: bool, embeddings: list[nn.Module] | None = None,
               **kwargs: Any) -> Case:  # fmt: skip
    return Case(model, (IDS,), {"": model}, kwargs=kwargs,
                wrt="embeddings" if embeddings else None, embeddings=embeddings or [],
                fix="SDPBackend.MATH" if breaks else "",
                fixed=math_attention if breaks else None)  # fmt: skip


def _bert_1(impl: str) -> nn.Module:
    torch.manual_seed(0)
    return tf.BertModel(tf.BertConfig(
        vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16, attn_implementation=impl,
    ))  # fmt: skip


def _gpt2_lm(impl: str) -> nn.Module:
    torch.manual_seed(0)
    return tf.GPT2LMHeadModel(tf.GPT2Config(
        vocab_size=32, n_embd=16, n_layer=1, n_head=2, n_positions=16, bos_token_id=0,
        eos_token_id=0, attn_implementation=impl,
    ))  # fmt: skip


def _llama_lm(impl: str) -> nn.Module:
    torch.manual_seed(0)
    return tf.LlamaForCausalLM(tf.LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16,
        attn_implementation=impl,
    ))  # fmt: skip


def _t5_seq2seq(impl: str) -> nn.Module:
    torch.manual_seed(0)
    return tf.T5ForConditionalGeneration(tf.T5Config(
        vocab_size=32, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2,
        decoder_start_token_id=0, attn_implementation=impl,
    ))  # fmt: skip


@case
def bert_ids_eager_eval_attention_mask():
    return _text_case(_bert_1("eager").eval(), False, attention_mask=MASK)


@case
def bert_ids_sdpa_train():
    return _text_case(_bert_1("sdpa").train(), False)


@case
def bert_ids_sdpa_eval_attention_mask():
    return _text_case(_bert_1("sdpa").eval(), True, attention_mask=MASK)


@case
def bert_embeddings_sdpa_eval():
    model = _bert_1("sdpa").eval()
    return _text_case(model, True, [model.embeddings.word_embeddings])


@case
def bert_embeddings_eager_train():
    model = _bert_1("eager").train()
    return _text_case(model, False, [model.embeddings.word_embeddings],
                      attention_mask=MASK)  # fmt: skip


@case
def gpt2_ids_eager_eval_labels():
    return _text_case(_gpt2_lm("eager").eval(), False, labels=IDS)


@case
def gpt2_ids_sdpa_eval_use_cache():
    return _text_case(_gpt2_lm("sdpa").eval(), True, use_cache=True)


@case
def gpt2_embeddings_eager_eval_use_cache():
    model = _gpt2_lm("eager").eval()
    return _text_case(model, False, [model.transformer.wte], use_cache=True)


@case
def llama_ids_eager_eval_use_cache():
    return _text_case(_llama_lm("eager").eval(), False, attention_mask=MASK,
                      use_cache=True)  # fmt: skip


@case
def llama_ids_sdpa_train_use_cache():
    return _text_case(_llama_lm("sdpa").train(), True, use_cache=True)


@case
def llama_embeddings_sdpa_eval_attention_mask():
    model = _llama_lm("sdpa").eval()
    return _text_case(model, True, [model.model.embed_tokens], attention_mask=MASK)


@case
def t5_ids_eager_eval():
    return _text_case(_t5_seq2seq("eager").eval(), False, decoder_input_ids=TARGET_IDS)


@case
def t5_ids_sdpa_eval_labels():
    return _text_case(_t5_seq2seq("sdpa").eval(), True, labels=TARGET_IDS)


@case
def t5_embeddings_sdpa_eval():
    # T5's encoder and decoder look up the shared table through modules of their own.
    model = _t5_seq2seq("sdpa").eval()
    return _text_case(model, True, [model.encoder.embed_tokens, model.decoder.embed_tokens],
                      decoder_input_ids=TARGET_IDS)  # fmt: skip


@case
def t5_embeddings_eager_train():
    model = _t5_seq2seq("eager").train()
    return _text_case(model, False, [model.encoder.embed_tokens, model.decoder.embed_tokens],
                      decoder_input_ids=TARGET_IDS)  # fmt: skip


# -- torch.nn ---------------------------------------------------------------------------
@case
def transformer_encoder_eval():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    return module_case(model, torch.randn(2, 5, 16), fix="SDPBackend.MATH",
                       fixed=math_attention)  # fmt: skip


@case
def transformer_train():
    torch.manual_seed(0)
    model = nn.Transformer(16, 2, 1, 1, 32, dropout=0.0, batch_first=True)
    return module_case(model, torch.randn(2, 5, 16), torch.randn(2, 4, 16),
                       fix="SDPBackend.MATH", fixed=math_attention)  # fmt: skip


@case
def lstm():
    torch.manual_seed(0)
    model = nn.LSTM(4, 6, batch_first=True)
    return module_case(model, torch.randn(2, 3, 4))


@case
def gru():
    torch.manual_seed(0)
    model = nn.GRU(4, 6, num_layers=2, batch_first=True)
    return module_case(model, torch.randn(2, 3, 4))


@case
def multihead_attention_need_weights_false():
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(16, 2, batch_first=True)
    return Case(lambda x: attention(x, x, x, need_weights=False)[0],
                (torch.randn(2, 5, 16),), {"attention": attention},
                fix="need_weights=True",
                fixed_fn=lambda x: attention(x, x, x)[0])  # fmt: skip


class ProtoNet(nn.Module):
    """Prototypes from a support set, logits as negative distances to them (cdist)."""

    def __init__(
        self, compute_mode: str = "use_mm_for_euclid_dist_if_necessary"
    ) -> None:
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4))
        self.compute_mode = compute_mode

    def forward(self, query: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
        prototypes = self.embed(support).reshape(3, 2, 4).mean(1)
        return -torch.cdist(
            self.embed(query), prototypes, compute_mode=self.compute_mode
        )


@case
def protonet_cdist():
    torch.manual_seed(0)
    model = ProtoNet()
    fixed = ProtoNet("use_mm_for_euclid_dist")
    fixed.load_state_dict(model.state_dict())
    return module_case(model, torch.randn(5, 6), torch.randn(6, 6),
                       fix="use_mm_for_euclid_dist", fixed_fn=fixed)  # fmt: skip


@case
def groupnorm_cnn():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.SiLU(),
        nn.Conv2d(8, 8, 3, stride=2), nn.GroupNorm(4, 8), nn.SiLU(),
        nn.Flatten(), nn.Linear(8 * 3 * 3, 1),
    )  # fmt: skip
    return module_case(model, torch.randn(2, 3, 8, 8))


@case
def batchnorm_cnn_eval():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.LazyLinear(1),
    )  # fmt: skip
    x = torch.randn(4, 3, 10, 10)
    with torch.no_grad():
        for _ in range(3):  # running statistics away from their initial values
            model(torch.randn(4, 3, 10, 10))
    return module_case(model.eval(), x)


@case
def pinn_mlp():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(),
                          nn.Linear(16, 1))  # fmt: skip
    return module_case(model, torch.rand(8, 2))


@case
def mlp_maml_parameters():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    return module_case(model, torch.randn(5, 4), wrt="parameters")


def _relu_mlp(seed: int) -> Case:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                          nn.Linear(16, 1))  # fmt: skip
    return module_case(model, torch.randn(8, 4))


def _dcgan_critic(seed: int) -> Case:
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 4, 2, 1), nn.LeakyReLU(0.2),
        nn.Conv2d(8, 16, 4, 2, 1), nn.LeakyReLU(0.2),
        nn.Flatten(), nn.Linear(16 * 4 * 4, 1),
    )  # fmt: skip
    return module_case(model, torch.randn(4, 1, 16, 16))


for _seed in range(4):
    CASES[f"relu_mlp_seed_{_seed}"] = lambda seed=_seed: _relu_mlp(seed)
for _seed in range(6):
    CASES[f"dcgan_leaky_relu_critic_seed_{_seed}"] = lambda seed=_seed: _dcgan_critic(
        seed
    )


class MinibatchStd(nn.Module):
    """StyleGAN2's minibatch standard deviation, appended as one more channel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        std = (x.var(0, unbiased=False) + 1e-8).sqrt().mean()
        return torch.cat([x, std.expand(x.shape[0], 1, *x.shape[2:])], 1)


class EqualConv(nn.Conv2d):
    """A convolution with StyleGAN2's equalised learning rate (weights scaled at run time)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = (self.in_channels * self.kernel_size[0] * self.kernel_size[1]) ** -0.5
        return F.conv2d(x, self.weight * scale, self.bias, self.stride, self.padding)


class ResBlock(nn.Module):
    """StyleGAN2's discriminator block: two convolutions, a downsampling skip, 1/sqrt(2)."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = (
            EqualConv(cin, cin, 3, padding=1),
            EqualConv(cin, cout, 3, padding=1),
        )
        self.skip = EqualConv(cin, cout, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.leaky_relu(self.conv1(x), 0.2) * 2**0.5
        y = F.avg_pool2d(F.leaky_relu(self.conv2(y), 0.2) * 2**0.5, 2)
        return (y + F.avg_pool2d(self.skip(x), 2)) / 2**0.5


@case
def stylegan2_discriminator_r1():
    torch.manual_seed(0)
    model = nn.Sequential(
        EqualConv(3, 8, 1), nn.LeakyReLU(0.2), ResBlock(8, 16), ResBlock(16, 16),
        MinibatchStd(), EqualConv(17, 16, 3, padding=1), nn.LeakyReLU(0.2),
        nn.Flatten(), nn.Linear(16 * 4 * 4, 1),
    )  # fmt: skip
    return module_case(model, torch.randn(4, 3, 16, 16))


def sn_critic(parametrized: bool = True) -> nn.Module:
    """An SNGAN critic: spectral norm as torch.nn.utils.parametrizations applies it (15 power
    iterations when applied), or as the older torch.nn.utils.spectral_norm (none)."""
    torch.manual_seed(0)
    sn = (
        nn.utils.parametrizations.spectral_norm
        if parametrized
        else nn.utils.spectral_norm
    )
    return nn.Sequential(sn(nn.Linear(4, 16)), nn.LeakyReLU(0.1), sn(nn.Linear(16, 16)),
                         nn.LeakyReLU(0.1), nn.Linear(16, 1))  # fmt: skip


@case
def spectral_norm_critic_eval():
    return module_case(sn_critic().eval(), torch.randn(6, 4))


@case
def spectral_norm_critic_train():
    return module_case(sn_critic().train(), torch.randn(6, 4))


class BagCritic(nn.Module):
    """A critic over a float input plus an EmbeddingBag over token ids (no per-sample weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(10, 4, mode="mean")
        self.body = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        return self.body(torch.cat([x, self.bag(ids)], 1))


@case
def embedding_bag_critic():
    torch.manual_seed(0)
    return module_case(
        BagCritic(), torch.randn(3, 4), torch.tensor([[1, 2], [3, 4], [5, 6]])
    )


class BiasOnlyNorm(nn.Module):
    """LayerNorm with a bias and no weight, then a small head."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.randn(6))
        self.head = nn.Linear(6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(F.layer_norm(x, (6,), None, self.bias)))


@case
def layer_norm_bias_without_weight():
    torch.manual_seed(0)
    return module_case(BiasOnlyNorm(), torch.randn(3, 6))
