from popcorn.cli import main

main(prog_name="popkit")
