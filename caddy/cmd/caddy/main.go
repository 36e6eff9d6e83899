// Command caddy is Caddy with its standard modules and retryafter's retry_after_limit and
// retry_after_normalize directives: the binary that xcaddy would build with
// --with github.com/retryafter/retryafter/caddy.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/retryafter/retryafter/caddy"
)

func main() {
	caddycmd.Main()
}
