"""The store engine: the store handle, memories and their writes and batches, history, the audit
ledger, the derived index and search, export and import."""
