module github.com/chanos/chanos

go 1.26.8
