"""ctxscope.inspector"""
