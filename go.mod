module idem

go 1.26.8
