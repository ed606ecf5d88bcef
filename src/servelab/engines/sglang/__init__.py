"""SGLang: its server command's grammar (`grammar`), the flags each release accepts (`releases/`), its
documented defaults (defaults.json) and its scheduler's policy (`policy`)."""
