"""ctxscope.inspector.reading"""
