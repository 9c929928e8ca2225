module plugreg-lab/pause

go 1.24.0
