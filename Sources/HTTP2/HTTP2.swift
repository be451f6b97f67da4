// Placeholder: replaced by the module's implementation.
