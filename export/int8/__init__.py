"""int8, in one place: recipes per CPU kind, their settings, the conversions, and the evidence.

    settings.py     Int8Settings (the quantizers' weight settings) and DEFAULT_INT8
    recipes.py      RECIPES (ways of turning the fused graph into int8) and TARGETS (which
                    recipes each kind of CPU tries, fastest first); convert(): a recipe run,
                    with the manifest's quantization record
    quantize.py     the conversions: dynamic int8 (QAttention, QEmbedLayerNormalization,
                    MatMulInteger), MatMulNBits, static QDQ
    evidence.toml   the measurements behind DEFAULT_INT8 and the TARGETS order, as data; the
                    manifest's quantization.evidence is read from it (evidence.py)

Around it: export/precisions.py routes `--quantize int8` here; export/agreement.py is int8's
judge (task agreement with the fp32 torch model); runtime/core/cpu.py tells the CPU kinds
apart, at export and when a graph made for another kind is loaded. The studies that measure
the evidence are bench/int8_study.py (settings) and bench/int8_recipes.py (recipes per CPU).
"""
