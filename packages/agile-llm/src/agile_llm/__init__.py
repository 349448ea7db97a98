"""agile_llm."""
