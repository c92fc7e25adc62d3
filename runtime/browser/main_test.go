package browser

import (
	"os"
)

func testingCI() bool { return os.Getenv("CI") != "" }
