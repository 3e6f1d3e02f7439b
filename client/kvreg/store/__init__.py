"""The local content-addressed store under ``$KVREG_HOME``: objects, refs, fsck, gc."""
