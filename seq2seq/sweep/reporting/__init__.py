"""A sweep's report: what its finished runs say, cell by cell, its tables, the attention
diagnostics and a continued sweep's two budgets side by side."""
