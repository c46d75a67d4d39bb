"""Draft sources: the contract every source keeps, the draft models, the lookup and auto."""
