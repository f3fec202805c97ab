"""ctxscope.inspector.pipeline"""
