"""Model families: the unit cross-validation leaves out. Two sizes of one family share an architecture and
usually a kernel mix, so leaving out one model while its sibling stays in the fit says little about a model
servelab has never seen; leaving out the whole family does."""

# family -> prefixes of servelab's embedded model names (specs/data/models)
FAMILIES = {
    "deepseek": ("deepseek-",),
    "qwen": ("qwen",),
    "llama": ("llama-",),
    "gpt-oss": ("gpt-oss-",),
}


def family_of(model_name: str) -> str:
    """The family of an embedded model name; a model of no listed family is a family of its own."""
    name = model_name.lower()
    for family, prefixes in FAMILIES.items():
        if name.startswith(prefixes):
            return family
    return name
