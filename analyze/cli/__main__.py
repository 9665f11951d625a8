from spiketrace.analyze.cli import main

main()
