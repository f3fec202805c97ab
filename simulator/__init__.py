"""ctxscope.simulator"""
