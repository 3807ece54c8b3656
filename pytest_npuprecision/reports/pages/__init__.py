"""The pages a run writes for people and for msprobe's tools: the HTML report with its plots, and msprobe's
accuracy_checking CSVs. Each is made from the case records alone."""
