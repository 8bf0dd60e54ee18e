package dist

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// EnvManifest names the environment variable that says where the
// manifest is: an http or https URL, a file URL, or a file path.
const EnvManifest = "AIRLOCK_IMAGE_MANIFEST"

// ConfigKey is the member of airlock's config file
// ($XDG_CONFIG_HOME/airlock/config.json, else
// ~/.config/airlock/config.json) that says where the manifest is, when
// $AIRLOCK_IMAGE_MANIFEST does not.
const ConfigKey = "image_manifest"

// maxConfigFile bounds what is read of the config file.
const maxConfigFile = 1 << 20

// ErrNoManifest says that no manifest is configured.
var ErrNoManifest = errors.New("no image manifest is configured: set " + EnvManifest +
	" to its URL or path, or \"" + ConfigKey + "\" in airlock's config.json (" +
	"$XDG_CONFIG_HOME/airlock/config.json); a mirror is made with `airlock image publish DIR`")

// ConfigFile is the path of airlock's config file.
func ConfigFile() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find airlock's config file: %w", err)
	}
	return filepath.Join(dir, "airlock", "config.json"), nil
}

// ConfiguredManifest returns where the manifest is, as a URL: from
// $AIRLOCK_IMAGE_MANIFEST, else from the config file's "image_manifest"
// (a relative path there is relative to the config file's folder). It
// returns ErrNoManifest when neither says.
func ConfiguredManifest() (string, error) {
	if v := os.Getenv(EnvManifest); v != "" {
		u, err := manifestURL(v, "")
		if err != nil {
			return "", fmt.Errorf("%s: %w", EnvManifest, err)
		}
		return u, nil
	}
	p, err := ConfigFile()
	if err != nil {
		return "", err
	}
	v, err := configValue(p)
	if err != nil {
		return "", err
	}
	if v == "" {
		return "", ErrNoManifest
	}
	u, err := manifestURL(v, filepath.Dir(p))
	if err != nil {
		return "", fmt.Errorf("%s's %s: %w", p, ConfigKey, err)
	}
	return u, nil
}

// ManifestURL turns a manifest's location as a user gives it (an http,
// https or file URL, or a path, relative to the working folder) into a
// URL.
func ManifestURL(v string) (string, error) { return manifestURL(v, "") }

// configValue reads "image_manifest" from the config file at p, "" when
// the file or the member is not there. Other members belong to other
// settings and are left alone.
func configValue(p string) (string, error) {
	b, err := readLimited(p, maxConfigFile)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(b, &members); err != nil {
		return "", fmt.Errorf("airlock's config file %s is not a JSON object: %w", p, err)
	}
	raw, ok := members[ConfigKey]
	if !ok {
		return "", nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("%s: %q must be a string (a URL or a path): %w", p, ConfigKey, err)
	}
	return v, nil
}

// manifestURL turns what a user wrote (a URL, or a path relative to
// base or the working folder) into a URL.
func manifestURL(v, base string) (string, error) {
	if strings.HasPrefix(v, "http://") || strings.HasPrefix(v, "https://") || strings.HasPrefix(v, "file://") {
		u, err := url.Parse(v)
		if err != nil {
			return "", err
		}
		if u.Host == "" && u.Scheme != "file" {
			return "", fmt.Errorf("%q names no host", v)
		}
		return u.String(), nil
	}
	if strings.Contains(v, "://") {
		return "", fmt.Errorf("%q: a manifest is an http, https or file URL, or a path", v)
	}
	p := v
	if !filepath.IsAbs(p) && base != "" {
		p = filepath.Join(base, p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String(), nil
}

func readLimited(p string, limit int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s has more than %d bytes", p, limit)
	}
	return b, nil
}
