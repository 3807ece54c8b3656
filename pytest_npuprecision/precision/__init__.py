"""The precision core: error metrics of an output against its golden, the standards that judge them, the
threshold and op tables, the verdicts and the second look. Pure functions of tensors and numbers; imports only
``common``."""
