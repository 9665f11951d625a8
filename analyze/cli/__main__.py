from analyze.cli import main

main()
