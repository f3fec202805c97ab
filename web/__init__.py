"""ctxscope.web"""
