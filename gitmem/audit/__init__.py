"""What keeps history honest: redaction, history rewrites and their journal, retention, verify, and
the audit timeline."""
