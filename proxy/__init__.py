"""ctxscope.proxy"""
