"""Which model family's code SGLang runs a checkpoint's MoE layers through, where it is another family's.

SGLang 0.5.23 serves GLM-5 (`GlmMoeDsaForCausalLM`) with a subclass of DeepSeek's model class
(sglang/srt/models/glm4_moe.py: `class GlmMoeDsaForCausalLM(DeepseekV2ForCausalLM)`), so its MoE layers are
`DeepseekV2MoE` (models/deepseek_v2.py), the same Python path, routing and expert dispatch as DeepSeek-V3's.
A term fitted on that path's CPU time (servelab.predict.fit_reach) has DeepSeek's evidence behind it there.
"""

# Hugging Face architecture -> the family (servelab.specs.families) whose MoE code SGLang runs it with
MOE_FAMILY_BY_ARCHITECTURE = {"GlmMoeDsaForCausalLM": "deepseek"}
