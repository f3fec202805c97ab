"""ctxscope.agent"""
