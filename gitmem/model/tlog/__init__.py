"""C2SP transparency-log formats, pure (docs/transparency.md): RFC 6962 Merkle trees and proofs
(:mod:`.merkle`), signed notes and verifier keys (:mod:`.note`), checkpoints and cosignature/v1
(:mod:`.checkpoint`), tlog-proof receipts (:mod:`.proof`) and tlog-policy (:mod:`.policy`).
No I/O: values in, values out, or :class:`gitmem.errors.InvalidInputError`."""
