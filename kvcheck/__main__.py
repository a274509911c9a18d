from kvcheck.cli import main

main()
