"""Problems, prompts and parsing of model output."""
