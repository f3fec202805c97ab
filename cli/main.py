import click
@click.group()
def cli():
    """ctxscope"""
