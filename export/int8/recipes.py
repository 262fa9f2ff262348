"""int8 recipes, and which one each kind of CPU gets.

A recipe is one way of turning the fused fp32 graph into int8 (RECIPES); a target is a kind of
CPU (runtime/core/cpu.py tells them apart from /proc/cpuinfo's flags) with its recipes in the
order they are tried (TARGETS): on VNNI and AMX the most accurate first, s8-smooth-qkv (as
close to fp32 as CTranslate2's int8, at s8's speed within 2-10%: `python -m
bertonnx.bench.int8_accuracy`), then the rest fastest first as `python -m
bertonnx.bench.int8_recipes` measured them. Export converts with the first recipe and judges it
by task agreement; a recipe the gate refuses gives way to the next.

    recipe             method                                  weights                attention
    s8-rr              quantize_dynamic of the fused graph     s8 per-channel, 7-bit  QAttention
    s8                 quantize_dynamic of the fused graph     s8 per-channel         QAttention
    s8-attention-fp32  quantize_dynamic, Attention left alone  s8 per-channel         fp32
    s8-smooth          s8 after SmoothQuant (smooth.py)        s8 per-channel         QAttention
    s8-rr-smooth       s8-rr after SmoothQuant                 s8 per-channel, 7-bit  QAttention
    s8-smooth-qkv      s8 after SmoothQuant of the MatMuls     s8 per-channel         QAttention
                       and of each Attention's QKV input
    s8-rr-smooth-qkv   s8-rr after the same                    s8 per-channel, 7-bit  QAttention
    s8-smooth-qkv-widest-fp32
                       s8-smooth-qkv, the MatMul with the      s8 per-channel         QAttention
                       widest input range left fp32
    s8-rr-smooth-qkv-widest-fp32
                       the same with 7-bit weights             s8 per-channel, 7-bit  QAttention
    nbits8             MatMulNBits, 8-bit blocks of 32, int8 compute (accuracy_level 4)
                                                               s8 blockwise           fp32
    static             quantize_static (QDQ), calibrated on real sentences
                                                               s8 per-channel         fp32

Why a target's order is what it is: each Target's `rationale`, read from evidence.toml with the
figures behind it (docs/benchmarks-history.md, "int8 per CPU").
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from bertonnx.runtime.core import cpu  # cpu.this_kind at call time: tests stand in for it
from bertonnx.runtime.core.batches import pad_encodings
from bertonnx.runtime.core.cpu import TARGET_KINDS
from bertonnx.runtime.core.errors import InputError, lookup

from ..texts import SENTENCES
from .evidence import target_rationale
from .settings import Int8Settings


@dataclass(frozen=True)
class Recipe:
    name: str
    method: str                          # "dynamic" | "nbits" | "static"
    summary: str
    settings: Int8Settings = field(default_factory=Int8Settings)  # dynamic and static weights
    attention: bool = True               # quantize the fused Attention (dynamic only)
    smooth: bool = False                 # SmoothQuant the MatMuls first (dynamic only)
    smooth_attention: bool = False       # ... and the fused Attention's QKV projection
    widest: int = 0                      # ≥ this many MatMuls fp32, the widest inputs (smooth)

    @property
    def calibrates(self) -> bool:
        """Whether it reads activations on real text (so needs the export's tokenizer)."""
        return self.smooth or self.method == "static"

    def record(self) -> dict:
        """What the manifest says about the recipe."""
        out = {"recipe": self.name, "method": self.method, "summary": self.summary}
        if self.method in ("dynamic", "static"):
            out.update(asdict(self.settings))
        if self.method == "dynamic":
            out["attention"] = "int8 (QAttention)" if self.attention else "fp32"
        return out


_S8 = Int8Settings(per_channel=True, weight_type="QInt8", reduce_range=False)
_S8_RR = Int8Settings(per_channel=True, weight_type="QInt8", reduce_range=True)

RECIPES: dict[str, Recipe] = {r.name: r for r in (
    Recipe("s8-rr", "dynamic", "dynamic int8 of the fused graph, s8 per-channel 7-bit weights "
           "(no int16 saturation on CPUs without VNNI)", _S8_RR),
    Recipe("s8", "dynamic", "dynamic int8 of the fused graph, s8 per-channel weights", _S8),
    Recipe("s8-attention-fp32", "dynamic", "dynamic int8 of the fused graph's MatMuls and "
           "embedding; Attention kept fp32", _S8, attention=False),
    # for activations with outlier channels (all-mpnet-base-v2's FFN inputs), where s8 is refused
    Recipe("s8-smooth", "dynamic", "dynamic int8 of the fused graph after SmoothQuant, s8 "
           "per-channel weights", _S8, smooth=True),
    Recipe("s8-rr-smooth", "dynamic", "dynamic int8 of the fused graph after SmoothQuant, s8 "
           "per-channel 7-bit weights", _S8_RR, smooth=True),
    # every quantized input smoothed, the Attention's too: all-MiniLM-L6-v2 as close to fp32
    # as CTranslate2's int8 (docs/int8.md, "Accuracy against CTranslate2")
    Recipe("s8-smooth-qkv", "dynamic", "dynamic int8 of the fused graph after SmoothQuant of "
           "every MatMul and Attention input, s8 per-channel weights", _S8, smooth=True,
           smooth_attention=True),
    Recipe("s8-rr-smooth-qkv", "dynamic", "dynamic int8 of the fused graph after SmoothQuant "
           "of every MatMul and Attention input, s8 per-channel 7-bit weights", _S8_RR,
           smooth=True, smooth_attention=True),
    # ... and at least one MatMul fp32: the one whose input's widest channel is furthest over
    # its median on the calibration sentences. all-MiniLM-L6-v2's (layer 0's FFN down, 21.6x;
    # the next 19.1x) held nearly all of its remaining error on long passages: worst of 2,560
    # held-out texts 0.9885 -> 0.9962 (docs/int8.md); all-mpnet-base-v2's two widest are
    # smooth.OUTLIER's already, so its graph is s8-smooth-qkv's
    Recipe("s8-smooth-qkv-widest-fp32", "dynamic", "s8-smooth-qkv with at least one MatMul "
           "left fp32, the one with the widest input range", _S8, smooth=True,
           smooth_attention=True, widest=1),
    Recipe("s8-rr-smooth-qkv-widest-fp32", "dynamic", "s8-rr-smooth-qkv with at least one "
           "MatMul left fp32, the one with the widest input range", _S8_RR, smooth=True,
           smooth_attention=True, widest=1),
    Recipe("nbits8", "nbits", "MatMulNBits: 8-bit blockwise weights (block 32), int8 compute "
           "(accuracy_level 4); Attention and embedding kept fp32"),
    Recipe("static", "static", "static int8 (QDQ) of the fused graph's MatMuls, activations "
           "calibrated on real sentences; Attention kept fp32", _S8),
)}


@dataclass(frozen=True)
class Target:
    name: str                    # --target-cpu value (runtime.core.cpu.TARGET_KINDS)
    recipes: tuple[str, ...]     # tried in this order (cpu.RECIPE_ORDER)

    @property
    def rationale(self) -> str:
        """Why this order (evidence.toml): what the manifest records as the evidence."""
        return target_rationale(self.name)


# The order of each row: evidence.toml ([recipes_per_cpu], [targets.KIND]).
# (the rows live in the runtime, which warns when a graph was made by another kind's row)
TARGETS: dict[str, Target] = {kind: Target(kind, order)
                              for kind, order in cpu.RECIPE_ORDER.items()}
assert tuple(TARGETS) == TARGET_KINDS  # the runtime's kinds and this table name the same CPUs
assert all(r in RECIPES for t in TARGETS.values() for r in t.recipes)


def target(name: str) -> Target:
    return lookup(TARGETS, name, "CPU target", choices="use auto or one of")


def recipe(name: str) -> Recipe:
    return lookup(RECIPES, name, "int8 recipe")


def resolve_target(name: str) -> tuple[str, str]:
    """(target kind, how it was chosen) for a --target-cpu value."""
    if name != "auto":
        return target(name).name, "--target-cpu"
    kind = cpu.this_kind()
    if kind is None:
        return "avx2", "auto: this CPU is none of the kinds the table knows; avx2's recipes"
    return kind, "auto: this CPU's flags"


def candidates(options, tokenizer=True) -> tuple[str, ...]:
    """The recipes an int8 export tries, in order: the user's settings or recipe, else the
    target's table row — without the recipes that calibrate on text where the export has no
    tokenizer (an adopted graph without one), which a recipe named by the user still meets
    as a one-line error."""
    if options.int8 is not None:
        return ("custom",)
    if options.int8_recipe is not None:
        return (recipe(options.int8_recipe).name,)
    row = TARGETS[resolve_target(options.target_cpu)[0]].recipes
    return row if tokenizer is not None else tuple(r for r in row if not RECIPES[r].calibrates)


def convert(name: str, box: list, options, scratch, tokenizer) -> tuple[object, dict]:
    """The fused fp32 graph in `box` (a list of one: taken out, so that quantize.int8 can drop
    it before the quantizer loads its own copy) in int8 by recipe `name` ("custom":
    options.int8's dynamic settings); returns the graph and the manifest's quantization
    record."""
    # lazy: quantize loads onnx and torch (via ..graph), and `bertonnx export --help` reads
    # this module's tables
    from . import quantize, smooth

    kind, how = resolve_target(options.target_cpu)
    if name == "custom":
        q, info = quantize.int8(box, options.int8, scratch)
        info.update(recipe="custom", summary="dynamic int8 with the settings given")
    else:
        r = recipe(name)
        if r.method == "dynamic" and r.smooth:
            # in place, in the box (no reference kept here: quantize.int8 drops it)
            n, fp32 = smooth.smooth(box[0], calibration_feeds(tokenizer, name), scratch,
                                    attention=r.smooth_attention, widest=r.widest)[1:]
            q, info = quantize.int8(box, r.settings, scratch, attention=r.attention,
                                    keep_fp32=tuple(fp32))
            what = "MatMuls and Attention inputs" if r.smooth_attention else "MatMuls"
            info["smoothing"] = (f"SmoothQuant (alpha {smooth.ALPHA}) of {n} {what}, "
                                 "activation maxima on export/texts.py's sentences")
            if fp32:
                info["fp32_matmuls"] = (
                    f"{len(fp32)} left fp32, unsmoothed: the inputs with a channel ≥ "
                    f"{smooth.OUTLIER:g}× its median" + (f", and at least the {r.widest} "
                                                          "widest" if r.widest else "")
                    + ": " + ", ".join(f"{k} ({round(v, 1):g}×)" for k, v in fp32.items()))
        elif r.method == "dynamic":
            q, info = quantize.int8(box, r.settings, scratch, attention=r.attention)
        elif r.method == "nbits":
            q, info = quantize.int8_nbits(box.pop())
        else:
            q, info = quantize.int8_static(box.pop(), calibration_feeds(tokenizer, name),
                                           r.settings, scratch)
        # quantize's word on the attention wins (an MPNet Attention stays fp32 whatever the
        # recipe: export/int8/quantize.py)
        info.update({k: v for k, v in r.record().items() if k != "attention" or k not in info})
    info.update(target=kind, target_chosen_by=how, evidence=TARGETS[kind].rationale)
    return q, info


def calibration_feeds(tokenizer, recipe_name: str = "static", batch: int = 8) -> list[dict]:
    """The calibration batches of static int8 and SmoothQuant: the real sentences of
    export/texts.py, right-padded like the runtime pads them."""
    if tokenizer is None:
        raise InputError(f"int8 recipe {recipe_name} needs the tokenizer to calibrate on real "
                         "text", "export with tokenizer files")
    feeds = []
    for i in range(0, len(SENTENCES), batch):
        encs = tokenizer.encode_batch(list(SENTENCES[i:i + batch]))
        p = pad_encodings(encs, tokenizer.pad_token_id, width=max(len(e.ids) for e in encs))
        feeds.append({"input_ids": p.input_ids, "attention_mask": p.attention_mask,
                      "token_type_ids": p.token_type_ids})
    return feeds
