"""ctxscope.inspector.base"""
