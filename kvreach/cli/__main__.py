from kvreach.cli import app

app()
