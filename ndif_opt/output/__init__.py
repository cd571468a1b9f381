"""What ndif-opt prints and writes: text reports, HTML, SARIF, generated docs, wording."""
